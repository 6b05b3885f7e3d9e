// Herald's web administration pages in a real headless browser, with no
// script of ours on the pages: starts `herald demo --serve` (a simulated Internet and a real
// server with an admin token), makes an account owner of the demo list and holds a post through
// the admin API, then as that owner: signs in with the form, sends a setting with an invalid
// value and finds the message next to the field (and the field marked invalid), finds a member
// by prefix, disables and re-enables them with the row's buttons, and approves the held post
// with its checkbox and a reason, and finds it delivered in a member's mailbox (`herald demo
// --mailbox`); rewords a message of the list. As the site administrator: creates a list,
// imports 100,000 members with the CSV form (progress page, the rejected row listed), finds one
// and exports them all. A moderator reaches the demo list's held posts and none of the other
// list's pages. A newcomer subscribes on the public form, confirms with the mailed link (the
// admin token is set), changes delivery on their subscriptions page and unsubscribes. Last, the
// list's public archive is read in German with its own words from a browser that prefers
// English. Saves a screenshot of the settings error
// (target/webadmin.png).
//
// Env: HERALD_BIN (default ../../target/debug/herald), CHROMIUM (default /usr/bin/chromium),
// SCREENSHOT (default ../../target/webadmin.png). Exits non-zero on any failure; always stops
// the browser and the server it started.
import { chromium } from "playwright-core";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, mkdirSync, writeFileSync, readFileSync, readdirSync, existsSync } from "node:fs";
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
const siteAdmin = "admin@d1.demo.test";
const moderator = "moderator@d1.demo.test";
// Addresses whose mail the demo writes to files (`herald demo --mailbox`): a member who should
// receive the approved post, and a newcomer who subscribes through the public form.
const reader = "reader@d0000.example";
const newcomer = "newcomer@d0001.example";
const big = "big@lists.herald.test";
const bigMembers = 100_000;
const deadline = setTimeout(() => fail("the web administration test took longer than 280 s"), 280_000);

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
      "--data-dir", join(dataDir, "demo"), "--serve", "--serve-secs", "270",
      "--admin-token", token, "--mailbox", reader, "--mailbox", newcomer,
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

// The newest message in `address`'s demo mailbox containing `needle` (quoted-printable soft
// line breaks undone), waiting up to a minute for it.
async function mailContaining(address, needle) {
  const dir = join(dataDir, "demo", "mailbox", address);
  const until = Date.now() + 60_000;
  while (Date.now() < until) {
    const files = existsSync(dir) ? readdirSync(dir).sort((a, b) => parseInt(b) - parseInt(a)) : [];
    for (const f of files) {
      const text = readFileSync(join(dir, f), "utf8").replace(/=\r?\n/g, "").replace(/=3D/g, "=");
      if (text.includes(needle)) return text;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`no mail to ${address} containing ${JSON.stringify(needle)}`);
}

// A link to `path` in `text`.
function linkIn(text, path) {
  const m = text.match(new RegExp("https?://[^\\s<>\"]*" + path + "[^\\s<>\"]*"));
  check(m, "no " + path + " link in: " + text.slice(0, 600));
  return m[0];
}

// Signs `address` in on a fresh browser context (JavaScript off) and returns its page.
async function signedIn(address, onError) {
  const ctx = await browser.newContext({ javaScriptEnabled: false });
  const p = await ctx.newPage();
  p.on("response", onError);
  await p.goto(url + "login");
  await p.fill("#address", address);
  await p.fill("#password", password);
  await Promise.all([p.waitForNavigation(), p.click("form[action='/login'] button[type=submit]")]);
  check(p.url().endsWith("/admin/"), address + " after sign-in: " + p.url());
  return p;
}

let url;
async function main() {
  url = await startServer();
  console.log("server at " + url);
  await api(url, "POST", "/api/v1/accounts", { address: owner, password });
  await api(url, "POST", "/api/v1/accounts", { address: siteAdmin, password, site_admin: true });
  await api(url, "POST", "/api/v1/accounts", { address: moderator, password });
  await api(url, "PUT", `/api/v1/accounts/${moderator}/roles/${list}`, { role: "moderator" });
  await api(url, "POST", `/api/v1/lists/${list}/members`, { address: reader });
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
  // Approved means delivered: the post reaches a member's mailbox in the simulated world.
  const delivered = await mailContaining(reader, "Please approve me.");
  check(delivered.includes("held-browser@d2.demo.test"), "the approved post is not the held one");

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

  // The site administrator: creates a list, imports 100,000 members with the CSV form (a
  // progress page that refreshes itself), finds one among them and exports them all.
  const asAdmin = await signedIn(siteAdmin, (r) => { if (r.status() >= 400) errors.push("admin: " + r.status() + " " + r.url()); });
  await asAdmin.goto(url + "admin/lists");
  await asAdmin.fill("#address", big);
  await asAdmin.fill("#display_name", "Big list");
  await Promise.all([asAdmin.waitForNavigation(), asAdmin.click("text=Create the list")]);
  const created = await api(url, "GET", `/api/v1/lists/${big}`);
  check(created.address === big, "the list was not created: " + JSON.stringify(created));
  await asAdmin.goto(url + `admin/lists/${encodeURIComponent(big)}/members`);
  let csv = "email,name\n";
  for (let i = 0; i < bigMembers; i++) csv += `m${i}@d${i % 20}.demo.test,Member ${i}\n`;
  csv += "not an address,Bad Row\n";
  await asAdmin.setInputFiles("#csv", { name: "members.csv", mimeType: "text/csv", buffer: Buffer.from(csv) });
  await Promise.all([asAdmin.waitForNavigation(), asAdmin.click("form[enctype='multipart/form-data'] button")]);
  await asAdmin.waitForSelector("p[role=status]", { timeout: 120_000 });
  const report = await asAdmin.textContent("p[role=status]");
  check(report.includes(`${bigMembers} added`) && report.includes("1 rejected"), "the import's report: " + report);
  check((await asAdmin.textContent("table")).includes(String(bigMembers + 2)), "the rejected row (its line) is not listed: " + await asAdmin.textContent("table"));
  await asAdmin.goto(url + `admin/lists/${encodeURIComponent(big)}/members`);
  await asAdmin.fill("#q", "m77777@");
  await Promise.all([asAdmin.waitForNavigation(), asAdmin.click("form[role=search] button")]);
  check(await asAdmin.$(`tr:has(th:text-is("m77777@d17.demo.test"))`) !== null, "m77777 not found among 100,000");
  const [download] = await Promise.all([asAdmin.waitForEvent("download"), asAdmin.click("text=Export the members as CSV")]);
  const exported = readFileSync(await download.path(), "utf8").trim().split("\n");
  check(exported.length === bigMembers + 1, "exported rows: " + exported.length);
  check(exported.some((l) => l.startsWith("m99999@d19.demo.test")), "the last member is not exported");
  await asAdmin.context().close();

  // A moderator of the demo list sees its held posts and nothing of another list.
  const refused = [];
  const asModerator = await signedIn(moderator, (r) => { if (r.status() >= 400) refused.push(r.status() + " " + r.url()); });
  await asModerator.goto(url + `admin/lists/${encodeURIComponent(list)}/held`);
  check(refused.length === 0, "the moderator's own held posts: " + refused.join("; "));
  for (const path of [`admin/lists/${encodeURIComponent(big)}`, `admin/lists/${encodeURIComponent(big)}/members`,
    `admin/lists/${encodeURIComponent(big)}/held`, `admin/lists/${encodeURIComponent(list)}/members`]) {
    const r = await asModerator.goto(url + path);
    check(r.status() === 403 || r.status() === 404, `the moderator reached ${path}: ${r.status()}`);
    check(!(await asModerator.textContent("body")).includes("m77777"), "the moderator saw members of " + path);
  }
  await asModerator.context().close();

  // A newcomer subscribes on the public form, confirms with the link mailed to them (the
  // admin token is set), then on their subscriptions page changes delivery and unsubscribes.
  const visitor = await browser.newContext({ javaScriptEnabled: false });
  const pub = await visitor.newPage();
  pub.on("response", (r) => { if (r.status() >= 400) errors.push("visitor: " + r.status() + " " + r.url()); });
  await pub.goto(url + `subscribe/${list}`);
  await pub.waitForTimeout(2500);
  await pub.fill("#email", newcomer);
  await Promise.all([pub.waitForNavigation(), pub.click("button[type=submit]")]);
  check((await pub.textContent("h1")).includes("Check your mailbox"), "the subscribe form's answer");
  const confirmation = await mailContaining(newcomer, "/confirm/");
  await pub.goto(linkIn(confirmation, "/confirm/"));
  const early = await fetch(url + `api/v1/lists/${list}/members/${newcomer}`, { headers: { authorization: "Bearer " + token } });
  check(early.status === 404, "opening the link (a GET, as a link scanner does) subscribed already: " + early.status);
  await Promise.all([pub.waitForNavigation(), pub.click("button[type=submit]")]);
  check((await pub.textContent("h1")).includes("Confirmed"), "the confirmation page: " + await pub.textContent("body"));
  const joined = await api(url, "GET", `/api/v1/lists/${list}/members/${newcomer}`);
  check(joined.address === newcomer, "not a member after confirming: " + JSON.stringify(joined));
  await pub.goto(url + "manage");
  await pub.waitForTimeout(2500);
  await pub.fill("#email", newcomer);
  await Promise.all([pub.waitForNavigation(), pub.click("button[type=submit]")]);
  const manageMail = await mailContaining(newcomer, "/manage/");
  await pub.goto(linkIn(manageMail, "/manage/"));
  await pub.selectOption("select[name=delivery]", "digest-mime");
  await Promise.all([pub.waitForNavigation(), pub.click("button[name=action][value=save]")]);
  check((await pub.textContent("body")).includes("Saved your settings"), "no saved notice on /manage");
  const changed = await api(url, "GET", `/api/v1/lists/${list}/members/${newcomer}/detail`);
  check(changed.delivery === "digest-mime", "the delivery mode did not change: " + JSON.stringify(changed));
  check(JSON.stringify(changed.consent || {}).includes("web"), "no consent recorded from the web: " + JSON.stringify(changed.consent));
  await Promise.all([pub.waitForNavigation(), pub.click("button[name=action][value=unsubscribe]")]);
  check((await pub.textContent("body")).includes("You are unsubscribed"), "no unsubscribed notice");
  const gone = await fetch(url + `api/v1/lists/${list}/members/${newcomer}`, { headers: { authorization: "Bearer " + token } });
  check(gone.status === 404, "still a member after unsubscribing: " + gone.status);
  await visitor.close();

  // The list's public archive in the list's language with its own words,
  // read by a visitor whose browser prefers English: published as the operator does it
  // (`herald archive privacy`), the list set to German and one page message reworded.
  const cfg = join(dataDir, "archive-cli.toml");
  writeFileSync(cfg, `data_dir = ${JSON.stringify(join(dataDir, "demo"))}\n`);
  execFileSync(bin, ["--config", cfg, "archive", "privacy", list, "public"]);
  await api(url, "PATCH", `/api/v1/lists/${list}`, { language: "de" });
  await api(url, "PUT", `/api/v1/lists/${list}/texts/archive-feed/de`, { text: "Unser Feed zum Abonnieren" });
  const englishBrowser = await browser.newContext({ javaScriptEnabled: false, locale: "en-US" });
  const archiveReader = await englishBrowser.newPage();
  archiveReader.on("response", (r) => { if (r.status() >= 400) errors.push(r.status() + " " + r.url()); });
  await archiveReader.goto(url + `archive/${list}/`);
  check(await archiveReader.getAttribute("html", "lang") === "de", "the archive is not in the list's language");
  check((await archiveReader.textContent("body")).includes("Unser Feed zum Abonnieren"), "the list's own words are missing");
  check((await archiveReader.textContent("form button")).trim() === "Suchen", "the search button is not German");
  await Promise.all([archiveReader.waitForNavigation(), archiveReader.click("ul a >> nth=0")]);
  check((await archiveReader.textContent("table tr th >> nth=2")).trim() === "Betreff", "the listing's headings are not German");
  await Promise.all([archiveReader.waitForNavigation(), archiveReader.click("table td a >> nth=0")]);
  check((await archiveReader.textContent("body")).includes("Rohfassung"), "the message page is not German");
  await englishBrowser.close();
  check(errors.length === 0, "page errors: " + errors.join("; "));
  console.log("web administration: sign-in, settings error, member disable/enable, approval delivered, list texts, " +
    "list created with 100,000 members imported, found and exported, moderator confined, subscribe-confirm-manage-unsubscribe, the archive's words: ok");
}

main().then(async () => { await cleanup(); console.log("web administration test passed"); process.exit(0); },
  (e) => fail(e.stack || String(e)));
