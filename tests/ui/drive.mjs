// drive.mjs - drives micd's admin page in a real headless Chromium for
// tests/test_ui.c, and says on stdout, as one JSON line, what the page
// showed.  No assertion is made here: the C test judges the report.
//
//   node tests/ui/drive.mjs URL KEY CHROMIUM SCREENSHOT MODE [GROUPS] [GOFILE]
//
// URL is micd's base URL (http://127.0.0.1:PORT), KEY the API key typed
// into the page, CHROMIUM the browser's executable, SCREENSHOT a PNG path
// ("-": none), GROUPS the groups whose detail is opened in turn (comma
// separated; the first is the one acted on).  MODE:
//   monitor  log in, open each group's detail; report
//   admin    the same, screenshot, press Requeue on the DLQ's first row,
//            wait until the page says it was requeued; report
//   refuse   the same as admin up to the press, then print {"ready":true}
//            and wait (up to 60 s) for GOFILE to exist (the C test demotes
//            the key meanwhile); press Requeue and wait for the page's
//            error banner; report
// The report: {"ok", "role", "who", "groups":{name:{pending,...}},
// "topics", "detail":{name:{dlq_rows, requeue_buttons, skip_buttons,
// chart_paths, blocked, blocked_rows}}, "notice", "after", "error",
// "role_after", "console":[{phase,type,text}], "failed":[{phase,url,
// error}], "http_errors":[{phase,url,status}], "step"} -- "ok" false with
// "error_js" when a step failed or timed out.
// Waits are puppeteer's waitForSelector / waitForFunction, never sleeps.
import { existsSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import puppeteer from 'puppeteer-core';

const [url, key, chromium, shot, mode, groupArg = 'billing', gofile = ''] = process.argv.slice(2);
const groups = groupArg.split(',');
const WAIT = 30000; // generous: the machine is loaded and micd runs with sanitizers
const report = { ok: false, mode, console: [], failed: [], http_errors: [], step: 'launch' };
let phase = 'load';
// Whatever happens, the script ends by itself (every wait below is shorter).
setTimeout(() => { out({ ...report, error_js: 'watchdog: 170 s' }); process.exit(3); }, 170000).unref();

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

async function waitForFile(path, ms) {
  const end = Date.now() + ms;
  while (!existsSync(path)) {
    if (Date.now() > end) throw new Error(`${path} did not appear within ${ms} ms`);
    await delay(50); // polling a condition the C side makes true
  }
}

async function figures(page) {
  return page.evaluate(() => {
    const g = {};
    for (const tr of document.querySelectorAll('#groups tbody tr')) {
      const v = (c) => tr.querySelector('.' + c).textContent;
      g[tr.dataset.group] = {
        pending: +v('c-pending'), processing: +v('c-processing'), dlq: +v('c-dlq'),
        dispatched: +v('c-dispatched'), blocked: +v('c-blocked'), event: v('c-event'),
        why: v('c-why'), alert: v('c-alert'),
      };
    }
    return g;
  });
}

// Open group 'g' in the page and say what its detail shows.
async function detail(page, g) {
  // (clicked inside the page: the table is redrawn every few seconds, and
  // a click from outside could land between a row's removal and its new
  // copy)
  await page.$eval(`#groups tbody tr[data-group="${g}"]`, (tr) => tr.click());
  await page.waitForSelector(`#detail[data-group="${g}"]`, { timeout: WAIT });
  await page.waitForSelector('#chart path', { timeout: WAIT });
  return page.evaluate(() => ({
    dlq_rows: [...document.querySelectorAll('#dlq tbody tr[data-seq]')].map((x) => +x.dataset.seq),
    requeue_buttons: document.querySelectorAll('#dlq button.requeue').length,
    skip_buttons: document.querySelectorAll('#dlq button.skip').length,
    chart_paths: document.querySelectorAll('#chart path').length,
    blocked: document.getElementById('blocked-summary').textContent,
    blocked_rows: [...document.querySelectorAll('#blocked tbody tr')].map((r) => r.textContent),
  }));
}

async function openGroups(page) {
  report.step = 'login';
  await page.goto(url + '/ui', { waitUntil: 'load', timeout: WAIT });
  await page.type('#key', key);
  await page.click('#login button[type=submit]');
  await page.waitForSelector('#updated[data-ok="1"]', { timeout: WAIT });
  report.role = await page.$eval('body', (b) => b.dataset.role);
  report.who = await page.$eval('#who', (e) => e.textContent);
  report.groups = await figures(page);
  report.topics = await page.$$eval('#topics tbody tr', (r) => r.map((x) => x.textContent));
  report.detail = {};
  // The first group named last: the one acted on, whose detail stays open.
  for (const g of [...groups.slice(1), groups[0]]) {
    report.step = 'open group ' + g;
    report.detail[g] = await detail(page, g);
  }
}

async function pressRequeue(page) {
  report.step = 'requeue';
  await page.$eval('#dlq tbody tr[data-seq] button.requeue', (b) => b.click());
}

let browser;
try {
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // Root in a container: no sandbox.  New headless mode.  No network
    // beyond 127.0.0.1 is ever asked for (the page's CSP forbids it).
    args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage',
           '--no-first-run', '--no-default-browser-check', '--disable-extensions',
           '--disable-background-networking', '--disable-component-update', '--disable-sync',
           '--metrics-recording-only', '--mute-audio'],
    timeout: 60000,
    protocolTimeout: 60000,
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warn' || m.type() === 'warning')
      report.console.push({ phase, type: m.type(), text: m.text() });
  });
  page.on('pageerror', (e) => report.console.push({ phase, type: 'pageerror', text: String(e) }));
  page.on('requestfailed', (r) => report.failed.push({ phase, url: r.url(), error: r.failure()?.errorText }));
  page.on('response', (r) => {
    if (r.status() >= 400) report.http_errors.push({ phase, url: r.url(), status: r.status() });
  });

  await openGroups(page);
  if (shot !== '-') {
    report.step = 'screenshot';
    await page.screenshot({ path: shot, fullPage: true });
  }
  if (mode === 'admin') {
    phase = 'action';
    const seq = report.detail[groups[0]].dlq_rows[0];
    await pressRequeue(page);
    await page.waitForFunction((s) => {
      const n = document.getElementById('notice');
      return !n.hidden && n.textContent.includes(`seq ${s} requeued`);
    }, { timeout: WAIT }, seq);
    report.notice = await page.$eval('#notice', (e) => e.textContent);
    // The page refreshed after the action: the row is gone from its DLQ.
    await page.waitForFunction((s) => !document.querySelector(`#dlq tbody tr[data-seq="${s}"]`),
                               { timeout: WAIT }, seq);
    report.after = await figures(page);
  } else if (mode === 'refuse') {
    out({ ready: true });
    report.step = 'wait for the go file';
    await waitForFile(gofile, 60000);
    phase = 'refuse';
    await pressRequeue(page);
    await page.waitForSelector('#error:not([hidden])', { timeout: WAIT });
    report.error = await page.$eval('#error-text', (e) => e.textContent);
    // A 403 makes the page ask whoami again: the buttons go.
    await page.waitForFunction(() => document.body.dataset.role !== 'admin', { timeout: WAIT });
    await page.waitForFunction(() => !document.querySelector('#dlq button.requeue'), { timeout: WAIT });
    report.role_after = await page.$eval('body', (b) => b.dataset.role);
  }
  report.step = 'done';
  report.ok = true;
} catch (e) {
  report.error_js = String(e && e.stack ? e.stack : e);
} finally {
  if (browser) await browser.close().catch(() => {});
}
out(report);
process.exit(0);
