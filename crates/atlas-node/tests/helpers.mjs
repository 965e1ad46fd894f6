// What the Node tests share: a fresh folder per test, and a space opened in it.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Memory } from 'atlas-memory'

/** A new folder, removed when the test ends. */
export function folder(t) {
  const dir = mkdtempSync(join(tmpdir(), 'atlas-node-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** A space in a new file (no background sleep cycle: the tests run it when they need it),
 * closed when the test ends. */
export async function space(t, options = {}) {
  const dir = folder(t)
  const memory = await Memory.open({ path: join(dir, 'atlas.db'), sleepCycle: false, ...options })
  t.after(() => memory.close())
  return { memory, dir }
}
