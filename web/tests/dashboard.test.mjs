// Herald's dashboard in a real headless browser: starts `herald demo --serve` (a simulated
// Internet and a real server, with an admin token), signs in through the login form, and checks
// that the charts draw data from the real fan-out, that live updates arrive (a repost every few
// seconds moves the counters), and saves a screenshot (target/dashboard.png) as a CI artifact;
// then, without the sign-in, the public subscribe form and the subscriptions page,
// and the web archive once the list's archive is made public.
//
// Env: HERALD_BIN (default ../../target/debug/herald), CHROMIUM (default /usr/bin/chromium),
// SCREENSHOT (default ../../target/dashboard.png). Exits non-zero on any failure; always stops
// the browser and the server it started.
import { chromium } from "playwright-core";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const bin = process.env.HERALD_BIN || join(root, "target/debug/herald");
const shot = process.env.SCREENSHOT || join(root, "target/dashboard.png");
const token = "dashboard-test-token-" + Math.random().toString(36).slice(2);
const dataDir = mkdtempSync(join(tmpdir(), "herald-dash-"));
const deadline = setTimeout(() => fail("the dashboard test took longer than 180 s"), 180_000);

let server, browser;
function fail(msg) {
  console.error("FAIL: " + msg);
  cleanup().finally(() => process.exit(1));
}
async function cleanup() {
  clearTimeout(deadline);
  if (browser) await browser.close().catch(() => {});
  if (server && server.exitCode === null) {
    server.kill("SIGINT");
    await new Promise((r) => { server.once("exit", r); setTimeout(() => { server.kill("SIGKILL"); r(); }, 20_000); });
  }
  rmSync(dataDir, { recursive: true, force: true });
}
const check = (ok, msg) => { if (!ok) throw new Error(msg); };

// Starts the demo server and resolves with the dashboard URL once it is serving.
function startServer() {
  return new Promise((resolveUrl, reject) => {
    server = spawn(bin, [
      "demo", "--members", "3000", "--domains", "40", "--size-kb", "4",
      "--data-dir", join(dataDir, "demo"), "--serve", "--serve-secs", "170", "--repost-secs", "3",
      "--admin-token", token,
    ], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    server.stdout.on("data", (d) => {
      out += d.toString();
      const m = out.match(/dashboard: (http:\/\/\S+)/);
      if (m) resolveUrl(m[1]);
    });
    server.on("exit", (code) => reject(new Error("herald demo exited early (" + code + "):\n" + out)));
  });
}

async function main() {
  const url = await startServer();
  console.log("dashboard at " + url);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
      "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  // Expected refusals (the wrong token, the unauthenticated probe) are checked explicitly below;
  // any other failed request or script error fails the test.
  page.on("console", (m) => { if (m.type() === "error" && !m.text().includes("Failed to load resource")) errors.push(m.text()); });
  page.on("response", (r) => {
    const expected = r.status() === 401 && (r.url().endsWith("/login") || r.url().endsWith("/api/v1/top"));
    if (r.status() >= 400 && !expected) errors.push(r.status() + " " + r.url());
  });

  // Without the cookie the API refuses and / shows the login form.
  const refused = await page.request.get(url + "api/top");
  check(refused.status() === 401, "API without the token answered " + refused.status());
  await page.goto(url);
  await page.fill("input[name=token]", "wrong-token-wrong-token");
  await page.click("button[type=submit]");
  check((await page.content()).includes("not right"), "a wrong token was not refused");
  await page.fill("input[name=token]", token);
  await Promise.all([page.waitForNavigation(), page.click("button[type=submit]")]);

  // Live data: the rate chart, a post card with its curve, the tables.
  await page.waitForFunction(() => Number(document.body.dataset.updates || 0) >= 2, null, { timeout: 30_000 });
  await page.waitForFunction(() => Number(document.querySelector("#rate-chart").dataset.points || 0) > 0, null, { timeout: 30_000 });
  await page.waitForFunction(() => {
    const c = document.querySelector(".post canvas");
    return c && Number(c.dataset.cumulative || 0) > 0;
  }, null, { timeout: 30_000 });
  const painted = await page.evaluate(() => {
    const c = document.querySelector("#rate-chart");
    const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < px.length; i += 4) if (px[i] > 0) n++;
    return n;
  });
  check(painted > 500, "the rate chart is blank (" + painted + " painted pixels)");
  const firstPost = await page.$eval(".post", (e) => ({ id: e.dataset.post, delivered: Number(e.dataset.delivered) }));
  check(firstPost.delivered > 0, "the post card shows no deliveries");
  await page.waitForFunction(() => document.querySelectorAll("#hourly tbody tr td").length > 1, null, { timeout: 30_000 });
  const lists = await page.textContent("#lists tbody");
  check(lists.includes("demo@lists.herald.test") && lists.includes("3,000"), "lists table: " + lists);

  // Live updates without reload: the update counter and the delivered total move.
  const before = await page.evaluate(() => ({ n: Number(document.body.dataset.updates), d: document.getElementById("s-delivered").textContent }));
  await page.waitForFunction((b) => Number(document.body.dataset.updates) >= b.n + 3
    && document.getElementById("s-delivered").textContent !== b.d, before, { timeout: 45_000 });
  const after = await page.evaluate(() => document.getElementById("s-delivered").textContent);
  console.log(`live: delivered ${before.d} -> ${after}`);

  // Let a repost's curve draw, then keep the picture.
  await page.waitForTimeout(2500);
  mkdirSync(dirname(shot), { recursive: true });
  await page.screenshot({ path: shot, fullPage: true });
  console.log("screenshot: " + shot);
  check(errors.length === 0, "page errors: " + errors.join("; "));

  // The public pages, as a newcomer's browser meets them: no dashboard cookie (the admin token
  // is set), the subscribe form of the demo list, a person's pace (the form's time-token wants
  // two seconds), the honeypot out of sight, the answer page.
  const visitor = await browser.newContext();
  const pub = await visitor.newPage();
  pub.on("pageerror", (e) => errors.push(String(e)));
  pub.on("response", (r) => { if (r.status() >= 400) errors.push(r.status() + " " + r.url()); });
  await pub.goto(url + "subscribe/demo@lists.herald.test");
  check((await pub.textContent("label[for=email]")).includes("e-mail address"), "no labelled address field");
  const trap = await pub.$eval("#website", (e) => {
    const r = e.getBoundingClientRect();
    return { offscreen: r.right < 0 || r.left > window.innerWidth, hidden: e.closest("[aria-hidden=true]") !== null };
  });
  check(trap.offscreen && trap.hidden, "the honeypot field is visible to people: " + JSON.stringify(trap));
  await pub.waitForTimeout(2500);
  await pub.fill("#email", "newcomer@d0002.example");
  await Promise.all([pub.waitForNavigation(), pub.click("button[type=submit]")]);
  const answer = await pub.textContent("h1");
  check(answer.includes("Check your mailbox"), "the subscribe form answered: " + answer);
  await pub.goto(url + "manage");
  check((await pub.textContent("button[type=submit]")).includes("Send me a link"), "no subscriptions form");
  await visitor.close();
  check(errors.length === 0, "page errors on the public pages: " + errors.join("; "));
  console.log("public subscribe and subscriptions pages: ok");

  // The web archive, as an anonymous reader browses it once the operator publishes
  // the list's archive with the CLI: the index, a month, a message (addresses hidden, no script
  // from a post runs), the search form with a filter, the month's mbox link and the feed.
  const cfg = join(dataDir, "cli.toml");
  writeFileSync(cfg, `data_dir = ${JSON.stringify(join(dataDir, "demo"))}\n`);
  const published = spawnSync(bin, ["--config", cfg, "archive", "privacy", "demo@lists.herald.test", "public"], { encoding: "utf8" });
  check(published.status === 0, "herald archive privacy: " + published.stderr + published.stdout);
  const reader = await browser.newContext();
  const arc = await reader.newPage();
  arc.on("pageerror", (e) => errors.push(String(e)));
  arc.on("dialog", (d) => { errors.push("a dialog opened: " + d.message()); d.dismiss(); });
  arc.on("response", (r) => { if (r.status() >= 400) errors.push(r.status() + " " + r.url()); });
  await arc.goto(url + "archive/");
  await Promise.all([arc.waitForNavigation(), arc.click("a[href='/archive/demo@lists.herald.test/']")]);
  check((await arc.textContent("h1")).includes("demo@lists.herald.test"), "the list's archive page");
  check(await arc.$("a[href='atom.xml']") !== null, "no feed link");
  await Promise.all([arc.waitForNavigation(), arc.click("ul a")]);
  const rows = await arc.$$eval("table tr", (r) => r.length - 1);
  check(rows >= 1, "the month page lists no message");
  check(await arc.$("a[href='mbox']") !== null, "no mbox link on the month page");
  await Promise.all([arc.waitForNavigation(), arc.click("table tr:nth-child(2) td:nth-child(3) a")]);
  const msg = await arc.textContent("body");
  check(msg.includes("Hello from the Herald demo"), "the message page: " + msg.slice(0, 300));
  check(msg.includes("poster at herald.test") && !msg.includes("poster@herald.test"),
    "the sender's address is not hidden: " + msg.slice(0, 300));
  await arc.goto(url + "archive/demo@lists.herald.test/");
  await arc.fill("input[name=q]", "Herald demo");
  await arc.fill("input[name=since]", "2000-01-01");
  await Promise.all([arc.waitForNavigation(), arc.click("form button")]);
  const results = await arc.textContent("body");
  check(/(One result|[1-9][0-9]* results) for/.test(results), "search found nothing: " + results.slice(0, 300));
  const feed = await arc.request.get(url + "archive/demo@lists.herald.test/atom.xml");
  check(feed.status() === 200 && (await feed.text()).includes("<feed"), "the feed");
  await reader.close();
  check(errors.length === 0, "page errors on the archive pages: " + errors.join("; "));
  console.log("web archive pages: ok");
}

main().then(async () => { await cleanup(); console.log("dashboard test passed"); process.exit(0); },
  (e) => fail(e.stack || String(e)));
