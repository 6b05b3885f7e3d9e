// Herald's web administration pages (issue 15 item 2) in a real headless browser, with no
// script of ours on the pages: starts `herald demo --serve` (a simulated Internet and a real
// server with an admin token), makes an account owner of the demo list and holds a post through
// the admin API, then as that owner: signs in with the form, sends a setting with an invalid
// value and finds the message next to the field (and the field marked invalid), finds a member
// by prefix, disables and re-enables them with the row's buttons, and approves the held post
// with its checkbox and a reason; rewords a message of the list and reads the list's public
// archive in German with it, from a browser that prefers English. Saves a screenshot of the settings error
// (target/webadmin.png).
//
// Env: HERALD_BIN (default ../../target/debug/herald), CHROMIUM (default /usr/bin/chromium),
// SCREENSHOT (default ../../target/webadmin.png). Exits non-zero on any failure; always stops
// the browser and the server it started.
import { chromium } from "playwright-core";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const bin = process.env.HERALD_BIN || join(root, "target/debug/herald");
const shot = process.env.SCREENSHOT || join(root, "target/webadmin.png");
const token = "webadmin-test-token-" + Math.random().toString(36).slice(2);
const dataDir = mkdtempSync(join(tmpdir(), "herald-webadmin-"));
const list = "demo@lists.herald.test";
const owner = "owner@d1.demo.test";
const password = "the owner's own long password";
const deadline = setTimeout(() => fail("the web administration test took longer than 150 s"), 150_000);

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

function startServer() {
  return new Promise((resolveUrl, reject) => {
    server = spawn(bin, [
      "demo", "--members", "500", "--domains", "20", "--size-kb", "2",
      "--data-dir", join(dataDir, "demo"), "--serve", "--serve-secs", "140",
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

// The operator's side, with the admin token (what `herald account` and an import do).
async function api(url, method, path, body, type = "application/json") {
  const r = await fetch(url + path.replace(/^\//, ""), {
    method,
    headers: { authorization: "Bearer " + token, "content-type": type },
    body: body === undefined ? undefined : (type === "application/json" ? JSON.stringify(body) : body),
  });
  const text = await r.text();
  check(r.ok, `${method} ${path}: ${r.status} ${text}`);
  return text ? (type === "application/json" || text.startsWith("[") || text.startsWith("{") ? JSON.parse(text) : text) : null;
}

async function main() {
  const url = await startServer();
  console.log("server at " + url);
  await api(url, "POST", "/api/v1/accounts", { address: owner, password });
  await api(url, "PUT", `/api/v1/accounts/${owner}/roles/${list}`, { role: "owner" });
  const subject = "A post for the moderators <b>bold?</b>";
  await api(url, "POST", `/api/v1/lists/${list}/held?reason=not%20a%20member`,
    `From: stranger@d2.demo.test\r\nTo: ${list}\r\nSubject: ${subject}\r\nMessage-ID: <held-browser@d2.demo.test>\r\n\r\nPlease approve me.\r\n`,
    "message/rfc822");
  const [first] = await api(url, "GET", `/api/v1/lists/${list}/members?limit=1`);
  const member = first.address;

  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
      "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage({ viewport: { width: 1300, height: 1000 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("dialog", (d) => { errors.push("a dialog opened: " + d.message()); d.dismiss(); });
  // The one expected refusal (422, the invalid setting) is checked explicitly.
  page.on("response", (r) => {
    if (r.status() >= 400 && r.status() !== 422) errors.push(r.status() + " " + r.url());
  });

  // Sign in with the form.
  await page.goto(url + "login");
  await page.fill("#address", owner);
  await page.fill("#password", password);
  await Promise.all([page.waitForNavigation(), page.click("form[action='/login'] button[type=submit]")]);
  check(page.url().endsWith("/admin/"), "after sign-in: " + page.url());

  // The list's settings: an invalid value, its message next to the field.
  await page.goto(url + "admin/lists");
  check((await page.textContent("main")).includes(list), "the owner's lists page lacks the list");
  await Promise.all([page.waitForNavigation(), page.click(`a[href="/admin/lists/${encodeURIComponent(list).replace(/\./g, "%2E")}"]`)]);
  check((await page.textContent("label[for=bounce_threshold]")).includes("Bounce score"), "no labelled bounce threshold");
  await page.fill("#bounce_threshold", "lots");
  await page.fill("#subject_prefix", "[demo]");
  await Promise.all([page.waitForNavigation(), page.click("text=Save the settings")]);
  const error = await page.textContent("#bounce_threshold-error");
  check(error.includes("whole number"), "the error next to the field: " + error);
  check(await page.getAttribute("#bounce_threshold", "aria-invalid") === "true", "the field is not marked invalid");
  const described = await page.getAttribute("#bounce_threshold", "aria-describedby");
  check(described.split(" ").includes("bounce_threshold-error"), "the field does not point at its error: " + described);
  check(await page.inputValue("#bounce_threshold") === "lots", "the value as typed is not kept");
  mkdirSync(dirname(shot), { recursive: true });
  await page.locator("#bounce_threshold").scrollIntoViewIfNeeded();
  await page.screenshot({ path: shot, fullPage: false });
  // Corrected: saved.
  await page.fill("#bounce_threshold", "4");
  await Promise.all([page.waitForNavigation(), page.click("text=Save the settings")]);
  check((await page.textContent("[role=status]")).includes("saved"), "no saved notice");
  const stored = await api(url, "GET", `/api/v1/lists/${list}`);
  check(stored.settings.bounce_threshold === 4 && stored.settings.subject_prefix === "[demo]",
    "settings not stored: " + JSON.stringify(stored.settings));

  // Members: find one by prefix, disable, re-enable.
  await page.click("nav.list-nav >> text=Members");
  await page.waitForSelector("#q");
  await page.fill("#q", member.slice(0, member.indexOf("@")));
  await Promise.all([page.waitForNavigation(), page.click("form[role=search] button")]);
  const row = `tr:has(th:text-is("${member}"))`;
  check(await page.$(row) !== null, "the member was not found: " + member);
  await Promise.all([page.waitForNavigation(), page.click(`${row} button[aria-label="Disable ${member}"]`)]);
  check((await page.textContent(row)).includes("disabled"), "not disabled");
  await Promise.all([page.waitForNavigation(), page.click(`${row} button[aria-label="Enable ${member}"]`)]);
  check((await page.textContent(`${row} td:nth-of-type(2)`)).trim() === "enabled", "not enabled again");

  // The held post: its subject as text, approved with its checkbox.
  await page.click("nav.list-nav >> text=Held posts");
  await page.waitForSelector("table");
  check((await page.textContent("table")).includes(subject), "the held post's subject");
  check(await page.$("table b") === null, "the subject's markup was rendered");
  await page.check("tbody input[type=checkbox]");
  await page.fill("#reason", "welcome");
  await Promise.all([page.waitForNavigation(), page.click("text=Approve selected")]);
  check((await page.textContent("[role=status]")).includes("Approved"), "no approved notice");
  check((await page.textContent("main")).includes("No post is waiting"), "the post is still held");
  const held = await api(url, "GET", `/api/v1/held?list=${list}`);
  check(held.length === 0, "still held: " + JSON.stringify(held));

  // The list's own words: a message's fields listed beside it; a field it lacks refused next
  // to the text area; a good text saved and used by the API's view.
  await Promise.all([page.waitForNavigation(), page.click("nav.list-nav >> text=Texts")]);
  const welcomeRow = `tr:has(code:text-is("welcome-subject"))`;
  check((await page.textContent(welcomeRow)).includes("{ $name }"), "the fields of welcome-subject");
  await Promise.all([page.waitForNavigation(), page.click(`${welcomeRow} a:text-is("en")`)]);
  check((await page.textContent("pre.shipped")).includes("Welcome to { $name }"), "the shipped text");
  await page.fill("#text", "Hello { $nobody }");
  await Promise.all([page.waitForNavigation(), page.click("text=Save")]);
  const textError = await page.textContent("#text-error");
  check(textError.includes("$nobody"), "the error next to the text: " + textError);
  check(await page.getAttribute("#text", "aria-invalid") === "true", "the text is not marked invalid");
  await page.fill("#text", "Glad to have you on { $name }");
  await Promise.all([page.waitForNavigation(), page.click("text=Save")]);
  check((await page.textContent("[role=status]")).includes("saved"), "no saved notice for the text");
  const texts = await api(url, "GET", `/api/v1/lists/${list}/texts`);
  const welcome = texts.messages.find((m) => m.id === "welcome-subject");
  check(welcome.overrides.length === 1 && welcome.overrides[0].text === "Glad to have you on { $name }",
    "the text was not stored: " + JSON.stringify(welcome));

  // The list's public archive in the list's language with its own words (issue 15 item 7),
  // read by a visitor whose browser prefers English: published as the operator does it
  // (`herald archive privacy`), the list set to German and one page message reworded.
  const cfg = join(dataDir, "archive-cli.toml");
  writeFileSync(cfg, `data_dir = ${JSON.stringify(join(dataDir, "demo"))}\n`);
  execFileSync(bin, ["--config", cfg, "archive", "privacy", list, "public"]);
  await api(url, "PATCH", `/api/v1/lists/${list}`, { language: "de" });
  await api(url, "PUT", `/api/v1/lists/${list}/texts/archive-feed/de`, { text: "Unser Feed zum Abonnieren" });
  const visitor = await browser.newContext({ javaScriptEnabled: false, locale: "en-US" });
  const reader = await visitor.newPage();
  reader.on("response", (r) => { if (r.status() >= 400) errors.push(r.status() + " " + r.url()); });
  await reader.goto(url + `archive/${list}/`);
  check(await reader.getAttribute("html", "lang") === "de", "the archive is not in the list's language");
  check((await reader.textContent("body")).includes("Unser Feed zum Abonnieren"), "the list's own words are missing");
  check((await reader.textContent("form button")).trim() === "Suchen", "the search button is not German");
  await Promise.all([reader.waitForNavigation(), reader.click("ul a >> nth=0")]);
  check((await reader.textContent("table tr th >> nth=2")).trim() === "Betreff", "the listing's headings are not German");
  await Promise.all([reader.waitForNavigation(), reader.click("table td a >> nth=0")]);
  check((await reader.textContent("body")).includes("Rohfassung"), "the message page is not German");
  await visitor.close();
  check(errors.length === 0, "page errors: " + errors.join("; "));
  console.log("web administration: sign-in, settings error, member disable/enable, approval, list texts, the archive's words: ok");
}

main().then(async () => { await cleanup(); console.log("web administration test passed"); process.exit(0); },
  (e) => fail(e.stack || String(e)));
