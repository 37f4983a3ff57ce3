// Loads a Chrome trace into speedscope's web app (its npm package: no network) in Debian's headless Chromium,
// the way a user opens a file there, and reports what speedscope said while importing it: every console warning
// and error (its trace importer warns for each end that does not match the innermost open span: a span that
// overlaps its neighbour or nests wrongly), the number of profiles (one per traced thread), their names, and a
// screenshot.
//   node speedscope_import.js MODULES_DIR TRACE SCREENSHOT [TITLE [sandwich] [leftheavy]]  ->  one JSON object
// on stdout (TITLE: what the page's title begins with once imported; default the file's name, as for a Chrome
// trace; a file in speedscope's own format is titled by its "name". sandwich: also, per profile, the Sandwich
// view's table, each frame's total and self time as speedscope prints them: {profile: [[name, total, self]...]}.
// leftheavy: also, per profile, the Left Heavy flame graph's top frames (depth 0), each with the total its
// tooltip prints: {profile: [[name, total]...]})
const path = require('path');
const [modules, trace, screenshot, title, ...modes] = process.argv.slice(2);
const {chromium} = require(path.join(modules, 'node_modules', 'playwright-core'));

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu'],
  });
  const out = {warnings: [], errors: [], requests: [], profiles: 0, names: [], title: '', sandwich: {}, leftHeavy: {}};
  try {
    const page = await browser.newPage({viewport: {width: 1600, height: 900}});
    page.on('console', m => {
      if (m.type() === 'warning') out.warnings.push(m.text());
      else if (m.type() === 'error') out.errors.push(m.text());
    });
    page.on('pageerror', e => out.errors.push(String(e)));
    // Nothing may come from the network: speedscope runs from its files.
    page.on('request', r => { if (!r.url().startsWith('file:') && !r.url().startsWith('data:') && !r.url().startsWith('blob:')) out.requests.push(r.url()); });
    await page.goto('file://' + path.join(modules, 'node_modules', 'speedscope', 'dist', 'release', 'index.html'));
    await page.setInputFiles('input[type=file]', trace);
    await page.waitForFunction(name => document.title.startsWith(name), title || path.basename(trace), {timeout: 120000});
    out.title = await page.title();
    // The toolbar names the profile shown, with "(i/N)" where there are several; "n" shows the next one.
    const shown = async () => {
      const text = await page.evaluate(() => document.body.innerText);
      for (const line of text.split('\n')) {
        const m = line.match(/^(.*) \((\d+)\/(\d+)\)$/);
        if (m) return {name: m[1].trim(), index: Number(m[2]), count: Number(m[3])};
      }
      return null;
    };
    let now = await shown();
    out.profiles = now ? now.count : 1;
    let pictured = false;
    // The Sandwich view's table: after its header, three lines per frame (total, self, name).
    const sandwich = async () => {
      await page.keyboard.press('3');
      await page.waitForTimeout(300);
      const lines = (await page.evaluate(() => document.body.innerText)).split('\n').map(l => l.trim());
      const at = lines.findIndex(l => /^Total\s+Self\s+Symbol Name$/.test(l));
      const rows = [];
      // (the rows shown: the table draws those in its window, the largest first)
      for (let k = at + 1; at >= 0 && k + 2 < lines.length && /^[0-9]/.test(lines[k]); k += 3)
        rows.push([lines[k + 2], lines[k], lines[k + 1]]);
      await page.keyboard.press('1');
      await page.waitForTimeout(100);
      return rows;
    };
    // The Left Heavy view draws its flame graph on a canvas; what can be read is the tooltip a hovered frame
    // shows: "TOTAL (PERCENT) NAME". Its top row holds each root frame once (merged), packed from the left edge
    // with no gap, the largest first, then nothing: so from the left edge, each frame's end is the first px that
    // shows another frame (or none), found by doubling steps then halving them (a hover costs a rendered frame,
    // some 50 ms here: a sweep of every px took minutes). Frames narrower than 1 px may be passed over.
    const tip = /^([0-9.]+(?:ns|µs|ms|s)) \((?:[<>]?[0-9.]+%)\) (.+)$/;
    const tipAt = async (x, y) => {
      await page.mouse.move(x, y);
      return page.evaluate(re => new Promise(done => requestAnimationFrame(() => {
        const m = document.body.innerText.split('\n').map(l => l.trim().match(new RegExp(re))).find(m => m);
        done(m ? [m[2], m[1]] : null);
      })), tip.source);
    };
    const leftHeavy = async () => {
      await page.mouse.move(0, 0);
      await page.keyboard.press('2');
      await page.waitForTimeout(300);
      // its panel: the lowest canvas (the minimap's is above it; the whole page's WebGL canvas starts at 0)
      const panel = await page.evaluate(() => [...document.querySelectorAll('canvas')]
        .map(c => c.getBoundingClientRect()).map(r => ({x: r.left, y: r.top, w: Math.floor(r.width), h: r.height}))
        .reduce((a, b) => (b.y > a.y ? b : a)));
      // The row of depth 0 lies below the time axis' labels: the first hit going down the left edge (where the
      // largest root frame begins), then a few px further into its 20 px row.
      let row = null;
      for (let y = panel.y + 1; row === null && y < panel.y + 100; y += 4)
        if (await tipAt(panel.x + 1.5, y)) row = y + 8;
      const at = i => tipAt(panel.x + i + 0.5, row);  // px i of the row
      const frames = new Map(), last = panel.w - 1;
      for (let i = 1, t = row === null ? null : await at(i); t;) {
        frames.set(t[0], t[1]);
        let lo = i, hi = i, u = t;  // lo shows t's frame; hi, once past it, another one or none
        for (let step = 1; u && u[0] === t[0]; step *= 2) {
          lo = hi;
          if (hi === last) u = null;  // t's frame reaches the right edge
          else u = await at(hi = Math.min(hi + step, last));
        }
        while (hi - lo > 1) {
          const mid = (lo + hi) >> 1, m = await at(mid);
          if (m && m[0] === t[0]) lo = mid;
          else [hi, u] = [mid, m];
        }
        [i, t] = [hi, u];
      }
      await page.mouse.move(0, 0);
      await page.keyboard.press('1');
      await page.waitForTimeout(100);
      return [...frames];
    };
    for (let i = 0; now && i < now.count; i++) {
      out.names.push(now.name);
      if (modes.includes('sandwich')) out.sandwich[now.name] = await sandwich();
      if (modes.includes('leftheavy')) out.leftHeavy[now.name] = await leftHeavy();
      if (!pictured && /worker/.test(now.name)) { // a DataLoader worker's timeline: batch > loader/sample > op
        await page.waitForTimeout(300);
        await page.screenshot({path: screenshot});
        pictured = true;
      }
      await page.keyboard.press('n');
      await page.waitForTimeout(50);
      now = await shown();
    }
    if (!pictured) {
      await page.waitForTimeout(300);
      await page.screenshot({path: screenshot});
    }
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
})().catch(e => {
  process.stderr.write(`speedscope_import: ${e.stack || e}\n`);
  process.exit(1);
});
