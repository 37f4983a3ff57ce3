// Loads a Chrome trace into speedscope's web app (its npm package: no network) in Debian's headless Chromium,
// the way a user opens a file there, and reports what speedscope said while importing it: every console warning
// and error (its trace importer warns for each end that does not match the innermost open span: a span that
// overlaps its neighbour or nests wrongly), the number of profiles (one per traced thread), their names, and a
// screenshot.
//   node speedscope_import.js MODULES_DIR TRACE SCREENSHOT [TITLE [sandwich]]  ->  one JSON object on stdout
// (TITLE: what the page's title begins with once imported; default the file's name, as for a Chrome trace; a
// file in speedscope's own format is titled by its "name". sandwich: also, per profile, the Sandwich view's
// table, each frame's total and self time as speedscope prints them: {profile: [[name, total, self]...]})
const path = require('path');
const [modules, trace, screenshot, title, mode] = process.argv.slice(2);
const {chromium} = require(path.join(modules, 'node_modules', 'playwright-core'));

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu'],
  });
  const out = {warnings: [], errors: [], requests: [], profiles: 0, names: [], title: '', sandwich: {}};
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
    for (let i = 0; now && i < now.count; i++) {
      out.names.push(now.name);
      if (mode === 'sandwich') out.sandwich[now.name] = await sandwich();
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
