// docs/NODE.md's examples, verbatim: each run with node in a folder of its own, and all of them
// type-checked by tsc against the package's declarations.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

const guide = join(process.env.ATLAS_DOCS || '../../docs', 'NODE.md')
const examples = [...readFileSync(guide, 'utf8').matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1])
// The examples are written into a folder below this one, whose node_modules holds the package.
const root = join(process.cwd(), 'docs-examples')

test('the guide has examples', () => {
  assert.ok(examples.length >= 3, `${examples.length} examples in ${guide}`)
})

examples.forEach((code, i) => {
  test(`example ${i + 1} of docs/NODE.md runs`, () => {
    const dir = join(root, `example-${i + 1}`)
    mkdirSync(dir, { recursive: true })
    writeFileSync(join(dir, 'example.mjs'), code)
    const printed = execFileSync(process.execPath, ['example.mjs'], {
      cwd: dir, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ATLAS_DB: join(dir, 'atlas.db') },
    }).toString()
    // `// → what it prints` (the words before any parenthesis) is checked against the output.
    for (const [, said] of code.matchAll(/\/\/ → ([^(\n]*)/g)) {
      assert.ok(printed.includes(said.trim()), `example ${i + 1} prints ${JSON.stringify(said.trim())}; it printed:\n${printed}`)
    }
  })
})

test("the guide's examples type-check against index.d.ts", { skip: !process.env.ATLAS_TSC && 'ATLAS_TSC names no tsc' }, () => {
  const files = examples.map((code, i) => {
    const file = join(root, `typed-${i + 1}.mjs`)
    mkdirSync(root, { recursive: true })
    writeFileSync(file, code)
    return file
  })
  const config = {
    compilerOptions: {
      allowJs: true, checkJs: true, noEmit: true, strict: true, module: 'nodenext', moduleResolution: 'nodenext',
      target: 'es2022', lib: ['esnext', 'dom'], types: ['node'],
      // The frameworks' own declarations are theirs to check; the examples and ours are checked.
      skipLibCheck: true,
    },
    files,
  }
  writeFileSync(join(root, 'tsconfig.json'), JSON.stringify(config, null, 2))
  try {
    execFileSync(process.env.ATLAS_TSC, ['-p', join(root, 'tsconfig.json')], { stdio: 'pipe' })
  } catch (error) {
    assert.fail(`tsc: ${error.stdout}${error.stderr}`)
  }
})
