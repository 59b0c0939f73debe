// The playground while its demo stops and comes back, in headless Chromium
// (puppeteer-core), for tests/playground.rs.
//
// Usage: node playground_reconnect.mjs <playground-url> <chromium>
//
// 1. Opens the playground and makes one JSON-RPC call.
// 2. Asks the test to stop the demo (prints {"need":"stop"}, reads one line
//    from stdin when it is done), then waits (on DOM state) until the page
//    says the demo is unreachable and has probed for it PROBES times.
// 3. Asks the test to start the demo again on the same ports
//    ({"need":"start"}), waits until the page is back online with its
//    WebSocket open and has polled again, and makes another call.
//
// Every request the page makes is recorded in order (CDP request events):
// path, and whether it failed. The Rust test judges the recording.
//
// stdout: {"need":…} lines, then one JSON summary line.
// Exit code 0 when the script ran to the end, 1 on an exception.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import puppeteer from 'puppeteer-core';

const STEP_MS = 60_000;
/** Failed probes to wait for while the demo is down. */
const PROBES = 4;
const [playgroundUrl, chromium] = process.argv.slice(2);
const summary = { requests: [], console: [], before: null, offline: null, after: null };

if (!playgroundUrl || !chromium) {
  process.stderr.write('usage: node playground_reconnect.mjs <playground-url> <chromium>\n');
  process.exit(2);
}

const input = readline.createInterface({ input: process.stdin });
const replies = input[Symbol.asyncIterator]();

/** Asks the Rust test to do `what` and waits until it has. */
async function need(what) {
  process.stdout.write(`${JSON.stringify({ need: what })}\n`);
  const { value, done } = await replies.next();
  if (done || value.trim() !== 'ok') throw new Error(`the test did not ${what} the demo: ${value}`);
}

/** Resolves on the next request the page makes to `path` (any query). */
function nextRequest(page, wanted) {
  return new Promise((resolve) => {
    const on = (req) => {
      if (new URL(req.url()).pathname === wanted) {
        page.off('request', on);
        resolve();
      }
    };
    page.on('request', on);
  });
}

/** `promise`, or an error naming `what` after `ms`. */
async function within(ms, what, promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

async function setInput(page, selector, value) {
  await page.$eval(selector, (el, v) => {
    el.value = v;
  }, value);
}

/** A JSON-RPC call from the page; the newest answered row. */
async function call(page) {
  await page.waitForSelector('#conn-state[data-state="open"]', { timeout: STEP_MS });
  await setInput(page, '#method', 'subtract');
  await setInput(page, '#params', '[42,23]');
  const before = await page.$$eval('#calls tr[data-state="answered"][data-upstream-id]', (rows) => rows.length);
  await page.click('#send');
  await page.waitForFunction(
    (n) => document.querySelectorAll('#calls tr[data-state="answered"][data-upstream-id]').length > n,
    { timeout: STEP_MS }, before,
  );
  return page.$eval('#calls tr[data-state="answered"][data-upstream-id]', (tr) => ({
    clientId: tr.dataset.clientId,
    upstreamId: tr.dataset.upstreamId,
    answer: tr.querySelector('td.answer').textContent,
  }));
}

async function linkState(page) {
  return page.$eval('#link-state', (el) => ({
    state: el.dataset.state,
    attempts: el.dataset.attempts ?? null,
    retryMs: el.dataset.retryMs ?? null,
    text: el.textContent,
  }));
}

async function main() {
  const profile = mkdtempSync(path.join(tmpdir(), 'switchyard-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      `--user-data-dir=${profile}`,
    ],
    protocolTimeout: 120_000,
  });
  try {
    const page = await browser.newPage();
    page.on('console', (m) => summary.console.push(`${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => summary.console.push(`pageerror: ${e.message}`));
    const entries = new Map();
    page.on('request', (req) => {
      const entry = { path: new URL(req.url()).pathname, failed: false };
      entries.set(req, entry);
      summary.requests.push(entry);
    });
    page.on('requestfailed', (req) => {
      const entry = entries.get(req);
      if (entry) entry.failed = true;
    });
    await page.goto(playgroundUrl, { waitUntil: 'load', timeout: STEP_MS });
    await page.waitForSelector('body[data-ready="true"]', { timeout: STEP_MS });
    summary.before = await call(page);

    await need('stop');
    await page.waitForSelector('#link-state[data-state="offline"]', { timeout: STEP_MS });
    await page.waitForFunction(
      (n) => Number(document.querySelector('#link-state').dataset.attempts) >= n,
      { timeout: 2 * STEP_MS }, PROBES,
    );
    summary.offline = await linkState(page);
    summary.connWhileOffline = await page.$eval('#conn-state', (el) => el.dataset.state);

    const polledAgain = Promise.all([nextRequest(page, '/metrics'), nextRequest(page, '/demo/upstream')]);
    await need('start');
    await page.waitForSelector('#link-state[data-state="online"]', { timeout: 2 * STEP_MS });
    await within(STEP_MS, 'polls of /metrics and /demo/upstream after the demo came back', polledAgain);
    summary.after = await call(page);
    summary.online = await linkState(page);
  } finally {
    await browser.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

main().then(
  () => {
    input.close();
    process.stdout.write(`${JSON.stringify(summary)}\n`, () => process.exit(0));
  },
  (err) => {
    input.close();
    summary.error = String(err?.stack ?? err);
    process.stdout.write(`${JSON.stringify(summary)}\n`, () => process.exit(1));
  },
);
