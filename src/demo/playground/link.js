// Whether the demo answers. The page's polls (the daemon's tapped lines,
// /metrics) run only while it does: the first failed request stops them
// all, and one probe of /demo/endpoints at a time, with a doubling delay
// (RETRY_MIN_MS up to RETRY_MAX_MS), asks whether the demo is back. When
// it answers, every poll resumes and the WebSocket reconnects.
//
// DOM state the tests wait on:
//   #link-state[data-state=online|offline]
//     [data-attempts]   probes that failed since the demo went away
//     [data-retry-ms]   the delay before the next probe

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10_000;

const $ = (id) => document.getElementById(id);

let online = true;
let attempts = 0;
let retryMs = RETRY_MIN_MS;
let probeTimer = null;
const stops = [];
const resumes = [];

/** True while the demo answers; polls check it before each request. */
export function isOnline() {
  return online;
}

/**
 * Registers a poll: `stop` when the demo goes away, `resume(endpoints)`
 * when it is back (with the endpoints it answered the probe with).
 */
export function register(stop, resume) {
  stops.push(stop);
  resumes.push(resume);
}

/** A request to the demo failed: stop polling and start probing. */
export function lost(why) {
  if (!online) return;
  online = false;
  attempts = 0;
  retryMs = RETRY_MIN_MS;
  for (const stop of stops) stop();
  show(`demo unreachable (${why})`);
  scheduleProbe();
}

/** Checks once whether the demo answers (e.g. after a WebSocket closed). */
export async function check(why) {
  if (!online) return;
  try {
    const res = await fetch('/demo/endpoints', { cache: 'no-store' });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
  } catch (e) {
    lost(why);
  }
}

function scheduleProbe() {
  clearTimeout(probeTimer);
  const el = $('link-state');
  el.dataset.retryMs = String(retryMs);
  probeTimer = setTimeout(probe, retryMs);
}

async function probe() {
  let endpoints;
  try {
    const res = await fetch('/demo/endpoints', { cache: 'no-store' });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    endpoints = await res.json();
  } catch (e) {
    attempts += 1;
    retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
    show(`demo unreachable: retrying in ${(retryMs / 1000).toFixed(1)} s (attempt ${attempts + 1})`);
    scheduleProbe();
    return;
  }
  online = true;
  const el = $('link-state');
  el.dataset.state = 'online';
  el.textContent = 'demo: connected';
  for (const resume of resumes) resume(endpoints);
}

function show(text) {
  const el = $('link-state');
  el.dataset.state = 'offline';
  el.dataset.attempts = String(attempts);
  el.textContent = text;
}
