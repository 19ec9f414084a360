// The Crawlee side of `scripts/bench.sh crawlee`: Crawlee's PuppeteerCrawler
// (puppeteer-core on the machine's Chromium) renders the test site's /page/{n}
// (or /app/{n}, by cfg.page) at a fixed concurrency, waits for #ready and counts li.item, like the farm
// side of internal/benchcrawlee. bench.sh installs @crawlee/puppeteer and
// puppeteer-core into a temp dir and copies this file next to node_modules.
//
// It speaks a line protocol with internal/benchcrawlee on stdin/stdout, so
// that the harness can read the process tree's CPU time around the measured
// part only: after the warm-up it prints "ready", waits for a line on stdin,
// renders the measured pages, prints one JSON line with the result, and
// exits. Its configuration is one JSON argument:
//   {"url": "http://127.0.0.1:port", "page": "page", "pages": 300, "delay": 0,
//    "concurrency": 6, "chrome": "/usr/lib/chromium/chromium", "flags": [...],
//    "incognito": false}
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { PuppeteerCrawler, Configuration, log } from '@crawlee/puppeteer';
import puppeteer from 'puppeteer-core';

const cfg = JSON.parse(process.argv[2]);
const wantItems = 200;
log.setLevel(log.LEVELS.WARNING);

// The request queue and session pool stay in memory: the farm keeps no
// local state on disk either (CRAWLEE_STORAGE_DIR points into the temp dir
// anyway, in case something writes).
const config = new Configuration({ persistStorage: false, purgeOnStart: true });

// A phase is a batch of requests and a promise that settles when every one
// of them was handled or failed.
let phase = null;
function startPhase(n) {
  let resolve;
  const done = new Promise((r) => { resolve = r; });
  phase = { left: n, ok: 0, failed: 0, errors: [], done, resolve };
  return phase;
}
function finish(ok, err) {
  const p = phase;
  if (ok) p.ok++; else { p.failed++; if (p.errors.length < 5) p.errors.push(String(err)); }
  if (--p.left === 0) p.resolve();
}

const crawler = new PuppeteerCrawler({
  launchContext: {
    launcher: puppeteer,
    launchOptions: { executablePath: cfg.chrome, headless: true, args: cfg.flags },
    // Crawlee's default opens a new tab per request in Chrome's default
    // context (cookies and cache shared); incognito pages get a browser
    // context each, like the farm's default isolation.
    useIncognitoPages: Boolean(cfg.incognito),
  },
  // browserPoolOptions are Crawlee's defaults: fingerprints injected, a
  // browser retired after 100 pages and another launched (the farm side
  // recycles its Chrome every 20 jobs and its process every 80).
  minConcurrency: cfg.concurrency,
  maxConcurrency: cfg.concurrency,
  autoscaledPoolOptions: { desiredConcurrency: cfg.concurrency },
  maxRequestRetries: 0,
  requestHandlerTimeoutSecs: 30,
  navigationTimeoutSecs: 30,
  // The crawler keeps running between the warm-up and the measured batch.
  keepAlive: true,
  async requestHandler({ page }) {
    // Presence, not { visible: true }: Puppeteer checks visibility by
    // polling on requestAnimationFrame, which Chrome hardly runs in tabs
    // that are not in front, and at six tabs the wait for a page whose API
    // answers after 400 ms took 1.9 s instead of 0.6 s. #ready is visible
    // as soon as it exists, so the result is the same.
    await page.waitForSelector('#ready', { timeout: 30_000 });
    const n = await page.evaluate(() => document.querySelectorAll('li.item').length);
    if (n !== wantItems) throw new Error(`li.item: ${n}, want ${wantItems}`);
    finish(true);
  },
  failedRequestHandler(_ctx, err) {
    finish(false, err);
  },
}, config);

function requests(from, n) {
  const out = [];
  for (let i = from; i < from + n; i++) {
    out.push({ url: `${cfg.url}/${cfg.page}/${i}?delay=${cfg.delay}` });
  }
  return out;
}

const running = crawler.run();

// Warm-up: one page per concurrent slot, outside the measure (and with
// other page numbers: Crawlee skips a URL it has seen).
let p = startPhase(cfg.concurrency);
await crawler.addRequests(requests(100_000, cfg.concurrency));
await p.done;
if (p.failed > 0) {
  console.error(`crawlee-bench: warm-up failed: ${p.errors.join('; ')}`);
  process.exit(1);
}

console.log('ready');
const lines = createInterface({ input: process.stdin });
await new Promise((r) => lines.once('line', r));
lines.close();

// Sample the pool's concurrency: Crawlee's autoscaling may hold it under
// the maximum when it finds the machine busy.
let samples = 0, sum = 0, max = 0;
const sampler = setInterval(() => {
  const c = crawler.autoscaledPool?.currentConcurrency ?? 0;
  samples++; sum += c; if (c > max) max = c;
}, 50);

p = startPhase(cfg.pages);
const t0 = process.hrtime.bigint();
await crawler.addRequests(requests(1, cfg.pages));
await p.done;
const elapsedMs = Number(process.hrtime.bigint() - t0) / 1e6;
clearInterval(sampler);

// What ran: bench.sh pins the versions; the result records them.
const version = (pkg) => JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url))).version;

console.log(JSON.stringify({
  versions: { '@crawlee/puppeteer': version('@crawlee/puppeteer'), 'puppeteer-core': version('puppeteer-core') },
  elapsed_ms: elapsedMs,
  ok: p.ok,
  failed: p.failed,
  errors: p.errors,
  mean_concurrency: samples ? sum / samples : 0,
  max_concurrency: max,
}));

crawler.stop();
await running;
process.exit(0);
