// What the inspector's browser tests and its first-paint benchmark share: Chromium launched
// the way this machine allows (headless, no background networking, a fresh profile), `atlas ui`
// started on a free loopback port, and a view opened and timed to its first paint.

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.ATLAS_CHROMIUM || '/usr/bin/chromium';

export async function browser() {
  const profile = mkdtempSync(join(tmpdir(), 'atlas-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1200, height: 900 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  return { context, close: async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); } };
}

/// Runs the atlas CLI and returns its standard output (JSON when asked with --json).
export function atlas(bin, db, args, env) {
  return execFileSync(bin, ['--db', db, ...args], { encoding: 'utf8', env: { ...process.env, ATLAS_LOG: 'warn', ...env } });
}

/// `atlas ui` on a free loopback port, serving `db`; resolves to its URL and a stop function.
export function serve(bin, db, token) {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, ['--db', db, 'ui'], {
      env: { ...process.env, ATLAS_LOG: 'warn', ...(token ? { ATLAS_TOKEN: token } : {}) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    const timer = setTimeout(() => { child.kill(); reject(new Error('atlas ui printed no address within 60 s')); }, 60000);
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const url = out.match(/http:\/\/127\.0\.0\.1:\d+\//);
      if (url) {
        clearTimeout(timer);
        resolve({ url: url[0].replace(/\/$/, ''), stop: () => new Promise((done) => { child.once('exit', done); child.kill('SIGTERM'); }) });
      }
    });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`atlas ui exited (${code}) before serving`)); });
  });
}

/// Opens `path` and waits for the view to paint; returns the first paint in ms from the start
/// of the navigation (the page records it after the view's first animation frame).
export async function open(page, base, path, view) {
  await page.goto(base + path);
  await page.waitForSelector(`body[data-ready="${view}"]`, { timeout: 30000 });
  return page.evaluate(() => window.atlasPaint.ms);
}

/// Sets the key in the page's form (kept in this tab's sessionStorage).
export async function useKey(page, key) {
  await page.fill('#key-input', key);
  await page.click('#key-form button');
}
