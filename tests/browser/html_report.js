// Opens lotus-bpf's HTML report in Debian's headless Chromium, offline, and reports what rendered: console errors
// and page errors, any request that is not for the file itself, and per chart (data-chart) whether it drew an
// SVG (how many shapes, its size on the page) or said why it has no data; a full-page screenshot.
//   node html_report.js MODULES_DIR REPORT.html SCREENSHOT  ->  one JSON object on stdout
const path = require('path');
const [modules, report, screenshot] = process.argv.slice(2);
const {chromium} = require(path.join(modules, 'node_modules', 'playwright-core'));

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu'],
  });
  const out = {errors: [], requests: [], charts: {}, title: ''};
  try {
    const page = await browser.newPage({viewport: {width: 1200, height: 900}});
    page.on('console', m => { if (m.type() === 'error') out.errors.push(m.text()); });
    page.on('pageerror', e => out.errors.push(String(e)));
    const self = 'file://' + path.resolve(report);
    page.on('request', r => { if (r.url() !== self) out.requests.push(r.url()); });
    await page.goto(self);
    out.title = await page.title();
    out.charts = await page.evaluate(() => {
      const charts = {};
      for (const el of document.querySelectorAll('[data-chart]')) {
        const svg = el.querySelector('svg');
        const box = (svg || el).getBoundingClientRect();
        const c = charts[el.dataset.chart] || (charts[el.dataset.chart] = []);
        c.push({
          svg: !!svg,
          shapes: svg ? svg.querySelectorAll('rect,line,circle,polygon,polyline,path').length : 0,
          rows: el.querySelectorAll('tr').length,
          absent: el.querySelector('.absent') ? el.querySelector('.absent').textContent : null,
          width: Math.round(box.width), height: Math.round(box.height),
        });
      }
      return charts;
    });
    await page.screenshot({path: screenshot, fullPage: true});
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
})().catch(e => {
  process.stderr.write(`html_report: ${e.stack || e}\n`);
  process.exit(1);
});
