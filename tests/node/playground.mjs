// Drives the demo's playground in headless Chromium over the Chrome
// DevTools Protocol (puppeteer-core), for tests/playground.rs.
//
// Usage: node playground.mjs <playground-url> <ws-jsonrpc-url> <screenshot.png> <chromium> [<http-url>]
//
// 1. Opens the status page, follows its link to the playground and, for
//    each WebSocket dialect (JSON-RPC, holon,
//    Sideband), performs a call from the page's own WebSocket; waits (on DOM
//    state, never on sleeps) for the answer and for the upstream id the page
//    read from the daemon's tapped lines; then a JSON-RPC batch.
// 2. Saves a screenshot.
// 3. Serves a page from another origin (a tiny HTTP server on another port)
//    and opens the JSON-RPC WebSocket from it in the same browser: the
//    upgrade must be refused.
// 4. The playground's HTTP panel: a call POSTed (the page's fetch to the
//    demo's jsonrpc-http listener) and an EventSource subscribed to the
//    daemon's feed, both from the playground's origin (allowed); with
//    <http-url>, a fetch from the other origin (its CORS preflight refused).
//
// CDP Network events record every WebSocket handshake: the Origin the
// browser sent and the HTTP status it got back.
//
// stdout: one JSON object with every observation; the Rust test asserts.
// Exit code 0 when the script ran to the end, 1 on an exception.

import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const STEP_MS = 60_000;
const [playgroundUrl, jsonrpcUrl, screenshot, chromium, httpUrl] = process.argv.slice(2);
const summary = { calls: {}, batch: null, handshakes: [], console: [], crossOrigin: null };

if (!playgroundUrl || !jsonrpcUrl || !screenshot || !chromium) {
  process.stderr.write('usage: node playground.mjs <playground-url> <ws-jsonrpc-url> <screenshot.png> <chromium>\n');
  process.exit(2);
}

/** Resolvers waiting for a page's first handshake outcome, by page label. */
const outcomeWaiters = new Map();

/** Resolves with the first handshake of `label` that got a status or failed. */
function handshakeOutcome(label) {
  const done = summary.handshakes.find((h) => h.page === label && (h.status || h.error));
  if (done) return Promise.resolve(done);
  return new Promise((resolve) => outcomeWaiters.set(label, resolve));
}

function settled(entry) {
  const wake = outcomeWaiters.get(entry.page);
  if (wake) {
    outcomeWaiters.delete(entry.page);
    wake(entry);
  }
}

/** Records WebSocket handshakes seen by CDP on `page`. */
async function watchHandshakes(page, label) {
  const cdp = await page.createCDPSession();
  await cdp.send('Network.enable');
  const byId = new Map();
  const urls = new Map();
  cdp.on('Network.webSocketCreated', (e) => urls.set(e.requestId, e.url));
  cdp.on('Network.webSocketWillSendHandshakeRequest', (e) => {
    const headers = Object.fromEntries(Object.entries(e.request.headers).map(([k, v]) => [k.toLowerCase(), v]));
    const url = urls.get(e.requestId) ?? null;
    const entry = { page: label, url, origin: headers.origin ?? null, status: null, error: null };
    byId.set(e.requestId, entry);
    summary.handshakes.push(entry);
  });
  cdp.on('Network.webSocketHandshakeResponseReceived', (e) => {
    const entry = byId.get(e.requestId);
    if (entry) {
      entry.status = e.response.status;
      settled(entry);
    }
  });
  cdp.on('Network.webSocketFrameError', (e) => {
    const entry = byId.get(e.requestId);
    if (entry) {
      entry.error = e.errorMessage;
      settled(entry);
    }
  });
  return cdp;
}

/** The cells of the newest call row matching `selector`. */
async function rowCells(page, selector) {
  return page.$eval(selector, (tr) => ({
    seq: tr.dataset.seq,
    state: tr.dataset.state,
    clientId: tr.dataset.clientId,
    upstreamId: tr.dataset.upstreamId ?? null,
    cells: Array.from(tr.cells, (td) => td.textContent),
  }));
}

async function setInput(page, selector, value) {
  await page.$eval(selector, (el, v) => {
    el.value = v;
  }, value);
}

async function call(page, dialect, method, params) {
  await page.select('#dialect', dialect);
  await page.waitForSelector('#conn-state[data-state="open"]', { timeout: STEP_MS });
  await page.waitForFunction((d) => document.querySelector('#conn-state').textContent.includes({
    jsonrpc: 'JSON-RPC', holon: 'holon', sideband: 'Sideband',
  }[d]), { timeout: STEP_MS }, dialect);
  await setInput(page, '#method', method);
  await setInput(page, '#params', params);
  const before = await page.$$eval(`#calls tr[data-dialect="${dialect}"]`, (rows) => rows.length);
  await page.click('#send');
  await page.waitForFunction(
    (d, n) => document.querySelectorAll(`#calls tr[data-dialect="${d}"]`).length > n,
    { timeout: STEP_MS }, dialect, before,
  );
  const selector = `#calls tr[data-dialect="${dialect}"][data-state="answered"][data-upstream-id]`;
  await page.waitForSelector(selector, { timeout: STEP_MS });
  const row = await rowCells(page, selector);
  const clientLog = await page.$$eval('#client-log li', (lis) => lis.map((li) => li.textContent));
  const upstreamLog = await page.$$eval('#upstream-log li', (lis) => lis.map((li) => li.textContent));
  return { row, clientLog, upstreamLog };
}

/** Drives the playground's HTTP panel: a POST, then an EventSource. */
async function httpPanel(page) {
  await page.waitForSelector('#http-send:not([disabled])', { timeout: STEP_MS });
  const endpoint = await page.$eval('#http-endpoint', (el) => el.textContent);
  await setInput(page, '#http-method', 'subtract');
  await setInput(page, '#http-params', '[42,23]');
  await page.click('#http-send');
  await page.waitForFunction(
    () => ['answered', 'error'].includes(document.querySelector('#http-reply').dataset.state),
    { timeout: STEP_MS },
  );
  const shown = await page.$eval('#http-reply', (el) => ({
    state: el.dataset.state,
    status: Number(el.dataset.status ?? 0),
    text: el.textContent,
  }));
  let body = null;
  try {
    body = JSON.parse(shown.text.split('\n').slice(1).join('\n'));
  } catch (e) {
    // Left null: the Rust test shows the text.
  }
  const selector = '#calls tr[data-dialect="http"][data-state="answered"][data-upstream-id]';
  await page.waitForSelector(selector, { timeout: STEP_MS });
  const row = await rowCells(page, selector);

  await setInput(page, '#sse-topic', 'daemon.>');
  await page.click('#sse-open');
  await page.waitForSelector('#sse-state[data-state="open"]', { timeout: STEP_MS });
  await page.waitForSelector('#sse-events li[data-topic]', { timeout: STEP_MS });
  const events = await page.$$eval('#sse-events li', (lis) => lis.map((li) => ({
    topic: li.dataset.topic,
    text: li.textContent,
  })));
  return {
    endpoint,
    reply: { state: shown.state, status: shown.status, text: shown.text, body },
    row,
    event: events[0] ?? null,
    events: events.length,
  };
}

async function crossOrigin(browser) {
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<!DOCTYPE html><title>another site</title><p>another origin</p>');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${server.address().port}`;
  try {
    const page = await browser.newPage();
    await watchHandshakes(page, 'other-origin');
    await page.goto(`${origin}/`, { waitUntil: 'load', timeout: STEP_MS });
    const result = await page.evaluate((url, ms) => new Promise((resolve) => {
      const ws = new WebSocket(url);
      const timer = setTimeout(() => resolve({ opened: false, timedOut: true }), ms);
      ws.addEventListener('open', () => {
        clearTimeout(timer);
        ws.close();
        resolve({ opened: true });
      });
      ws.addEventListener('close', (ev) => {
        clearTimeout(timer);
        resolve({ opened: false, code: ev.code });
      });
    }), jsonrpcUrl, STEP_MS);
    // The handshake's CDP events may arrive after the page saw the close:
    // wait for them (bounded), not for a fixed time.
    let timer;
    const handshake = await Promise.race([
      handshakeOutcome('other-origin'),
      new Promise((resolve) => {
        timer = setTimeout(() => resolve(null), STEP_MS);
      }),
    ]);
    clearTimeout(timer);
    // JSON from another origin: the CORS preflight is refused, so the
    // browser never sends the call.
    const fetched = httpUrl ? await page.evaluate(async (url) => {
      try {
        const r = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}',
        });
        return { status: r.status };
      } catch (e) {
        return { refused: String(e) };
      }
    }, httpUrl) : null;
    return { origin, ...result, handshake, fetch: fetched };
  } finally {
    server.close();
  }
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
    await page.setViewport({ width: 1280, height: 1100 });
    page.on('console', (m) => summary.console.push(`${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => summary.console.push(`pageerror: ${e.message}`));
    await watchHandshakes(page, 'playground');
    // The status page links to the playground.
    const statusUrl = new URL('/', playgroundUrl).href;
    await page.goto(statusUrl, { waitUntil: 'load', timeout: STEP_MS });
    const link = await page.$('a#playground');
    if (!link) throw new Error(`the status page ${statusUrl} has no link to the playground`);
    const [response] = await Promise.all([
      page.waitForNavigation({ waitUntil: 'load', timeout: STEP_MS }),
      link.click(),
    ]);
    summary.page = {
      url: page.url(),
      status: response.status(),
      csp: response.headers()['content-security-policy'] ?? null,
    };
    await page.waitForSelector('body[data-ready="true"]', { timeout: STEP_MS });
    summary.idNote = await page.$eval('#id-note', (p) => p.textContent);

    summary.calls.jsonrpc = await call(page, 'jsonrpc', 'subtract', '[42,23]');
    summary.calls.holon = await call(page, 'holon', 'echo', '{"hello":"holon"}');
    summary.calls.sideband = await call(page, 'sideband', 'echo', '{"text":"hi"}');

    // A JSON-RPC batch: two calls and a notification in one frame.
    await page.select('#dialect', 'jsonrpc');
    await page.waitForSelector('#conn-state[data-state="open"]', { timeout: STEP_MS });
    await page.waitForFunction(() => document.querySelector('#conn-state').textContent.includes('JSON-RPC'), { timeout: STEP_MS });
    await setInput(page, '#method', 'subtract');
    await setInput(page, '#params', '[42,23]');
    await page.click('#batch');
    await page.waitForFunction(
      () => document.querySelectorAll('#calls tr[data-dialect="jsonrpc"][data-state="answered"][data-upstream-id]').length >= 3,
      { timeout: STEP_MS },
    );
    summary.batch = await page.$$eval('#calls tr[data-dialect="jsonrpc"]', (rows) => rows.map((tr) => ({
      clientId: tr.dataset.clientId,
      upstreamId: tr.dataset.upstreamId ?? null,
      answer: tr.querySelector('td.answer').textContent,
    })));
    // Pub/sub: subscribe to the daemon's feed; its events arrive on the page.
    await setInput(page, '#method', 'rpc.subscribe');
    await setInput(page, '#params', '{"topic":"daemon.>"}');
    await page.click('#send');
    await page.waitForFunction(
      () => Array.from(document.querySelectorAll('#client-log li'), (li) => li.textContent)
        .some((t) => t.includes('"rpc.notification"') && t.includes('"daemon.events"')),
      { timeout: STEP_MS },
    );
    summary.subscribed = await page.$$eval('#calls tr[data-dialect="jsonrpc"]', (rows) => rows
      .filter((tr) => tr.cells[2].textContent === 'rpc.subscribe')
      .map((tr) => ({ state: tr.dataset.state, answer: tr.querySelector('td.answer').textContent })));
    summary.events = await page.$$eval('#client-log li', (lis) => lis
      .map((li) => li.textContent)
      .filter((t) => t.includes('"rpc.notification"')).length);
    // Counters show the traffic (polled every 2 s by the page).
    await page.waitForFunction(
      () => Number(document.querySelector('#counters tr[data-listener="sideband"] td.requests')?.textContent) >= 1,
      { timeout: STEP_MS },
    );
    summary.counters = await page.$$eval('#counters tbody tr', (rows) => rows.map((tr) => Array.from(tr.cells, (td) => td.textContent)));
    // JSON-RPC over HTTP through the page's own panel: a call POSTed with
    // fetch, and the daemon's feed through an EventSource.
    summary.http = await httpPanel(page);
    await page.screenshot({ path: screenshot, fullPage: true });
    await page.click('#sse-close');
    summary.http.closed = await page.$eval('#sse-state', (el) => el.dataset.state);

    summary.crossOrigin = await crossOrigin(browser);
  } finally {
    await browser.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

main().then(
  () => {
    process.stdout.write(`${JSON.stringify(summary)}\n`, () => process.exit(0));
  },
  (err) => {
    summary.error = String(err?.stack ?? err);
    process.stdout.write(`${JSON.stringify(summary)}\n`, () => process.exit(1));
  },
);
