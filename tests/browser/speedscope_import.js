// Loads a Chrome trace into speedscope's web app (its npm package: no network) in Debian's headless Chromium,
// the way a user opens a file there, and reports what speedscope said while importing it: every console warning
// and error (its trace importer warns for each end that does not match the innermost open span: a span that
// overlaps its neighbour or nests wrongly), the number of profiles (one per traced thread), their names, and a
// screenshot.
//   node speedscope_import.js MODULES_DIR TRACE SCREENSHOT  ->  one JSON object on stdout
const path = require('path');
const [modules, trace, screenshot] = process.argv.slice(2);
const {chromium} = require(path.join(modules, 'node_modules', 'playwright-core'));

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu'],
  });
  const out = {warnings: [], errors: [], requests: [], profiles: 0, names: [], title: ''};
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
    await page.waitForFunction(name => document.title.startsWith(name), path.basename(trace), {timeout: 120000});
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
    for (let i = 0; now && i < now.count; i++) {
      out.names.push(now.name);
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
