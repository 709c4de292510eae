/**
 * The dashboard in a real browser (Debian's Chromium driven by
 * playwright-core) against a real local server: sign in once, the runs list,
 * a demo-enrich run followed live to its end, the dataset preview paged,
 * cancel, rerun and signal. Screenshots go to artifacts/.
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
// @ts-expect-error: a plain .mjs helper shared with the scripts
import { startServer, stopServer } from "../scripts/local-server.mjs";
// @ts-expect-error: a plain .mjs script
import { buildDashboard } from "../scripts/build-dashboard.mjs";
import { TroupeClient } from "../src/client/index.ts";
import { CHROMIUM_FLAGS, findOrInstallChromium } from "./chromium.ts";

const PORT = 8814;
const BASE = `http://127.0.0.1:${PORT}`;
const ARTIFACTS = fileURLToPath(new URL("../artifacts/", import.meta.url));
/** The longest any single wait in this file may take; none is a timing claim. */
const WAIT_MS = 90_000;

const browser = findOrInstallChromium();
if ("missing" in browser) {
  const line = "!".repeat(100);
  console.error(`\n${line}\n!! SKIPPED: the dashboard's browser tests did not run: ${browser.missing}\n${line}\n`);
}

const api = new TroupeClient({ baseUrl: BASE, token: "dev-token" });

function leads(prefix: string, count: number) {
  // Every 40th row fails at the provider, so the bars and the preview show failures too.
  return Array.from({ length: count }, (_, i) => ({
    id: `${prefix}-${i}`,
    name: i % 40 === 7 ? `!fail Person ${i}` : `Person ${i}`,
    domain: "example.com",
  }));
}

/** The map's progress bar: rows done (completed + failed) of its total. */
async function progressOf(page: Page, map: string): Promise<{ done: number; total: number }> {
  const bar = page.locator(`[data-map="${map}"] [role="progressbar"]`);
  return { done: Number(await bar.getAttribute("aria-valuenow")), total: Number(await bar.getAttribute("aria-valuemax")) };
}

async function statusOf(page: Page): Promise<string> {
  return (await page.getByTestId("run-status").textContent()) ?? "";
}

async function untilStatus(page: Page, statuses: string[]): Promise<string> {
  await expect.poll(() => statusOf(page), { timeout: WAIT_MS, interval: 100 }).toSatisfy((s: string) => statuses.includes(s));
  return statusOf(page);
}

async function openRun(page: Page, runId: string): Promise<void> {
  await page.goto(`${BASE}/#/runs/${runId}`);
  // This run's page: a change of hash returns before the app swaps pages, and the run shown before has a status too.
  await page.locator(`[data-testid="run-page"][data-run-id="${runId}"] [data-testid="run-status"]`).waitFor({ timeout: WAIT_MS });
}

describe.skipIf("missing" in browser)("the dashboard in Chromium", () => {
  const state = mkdtempSync(join(tmpdir(), "troupe-dashboard-"));
  const profile = mkdtempSync(join(tmpdir(), "troupe-chromium-"));
  let server: unknown;
  let context: BrowserContext;
  let page: Page;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    // The dashboard as the source is now, also when this file is run on its own.
    await buildDashboard();
    server = await startServer({ port: PORT, stateDir: state });
    // Slow provider calls, paced at 50 requests/s: a run of a few hundred rows lasts seconds (500 rows at least
    // ten), so the page watches it while it runs however many executors fan its calls out.
    const res = await fetch(`${BASE}/v1/sim/config`, {
      method: "PUT",
      headers: { Authorization: "Bearer dev-token", "Content-Type": "application/json" },
      body: JSON.stringify({ latencyMs: 50 }),
    });
    expect(res.status).toBe(200);
    const paced = await fetch(`${BASE}/v1/pacing/sim`, {
      method: "PUT",
      headers: { Authorization: "Bearer dev-token", "Content-Type": "application/json" },
      body: JSON.stringify({ requestsPerSecond: 50 }),
    });
    expect(paced.status).toBe(200);
    context = await chromium.launchPersistentContext(profile, {
      executablePath: (browser as { path: string }).path,
      headless: true,
      args: CHROMIUM_FLAGS,
      viewport: { width: 1280, height: 900 },
    });
    page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(WAIT_MS);
    page.on("pageerror", (error) => pageErrors.push(`pageerror: ${error.message}`));
    page.on("console", (message) => {
      if (message.type() === "error") pageErrors.push(`console: ${message.text()}`);
    });
  });

  afterAll(async () => {
    await context?.close();
    if (server) await stopServer(server);
    rmSync(state, { recursive: true, force: true });
    rmSync(profile, { recursive: true, force: true });
  });

  it("asks for the token once, then lists the org's runs", async () => {
    const earlier = await api.submit({ play: "demo-enrich", input: { rows: leads("first", 3) } });
    await page.goto(`${BASE}/`);
    await page.getByTestId("token-input").fill("not-a-token");
    await page.getByTestId("token-save").click();
    await expect.poll(() => page.getByTestId("token-error").textContent(), { timeout: WAIT_MS }).toContain("refused");
    // The browser logs the refused token's 401 as a console error: expected here, and only here.
    pageErrors.splice(0);

    await page.getByTestId("token-input").fill("dev-token");
    await page.getByTestId("token-save").click();
    await page.locator(`tr[data-run-id="${earlier.runId}"]`).waitFor();

    // Kept in this browser: a new visit goes straight to the runs.
    await page.reload();
    await page.locator(`tr[data-run-id="${earlier.runId}"]`).waitFor();
    expect(await page.getByTestId("token-input").count()).toBe(0);
    await page.screenshot({ path: join(ARTIFACTS, "dashboard-runs.png"), fullPage: true });
  });

  it("follows a demo-enrich run live: the bar moves, the log fills, the run ends completed", async () => {
    // Paced at 50 requests/s (beforeAll), its 500 rows take ten seconds or more: the bar stands part-way meanwhile.
    const total = 500;
    const started = await api.submit({ play: "demo-enrich", input: { rows: leads("live", total) } });
    // The list updates by itself; the new run is opened from it.
    const link = page.locator(`tr[data-run-id="${started.runId}"] a[href="#/runs/${started.runId}"]`);
    await link.waitFor();
    await link.click();
    await page.getByTestId("run-status").waitFor();

    await expect
      .poll(() => progressOf(page, "leads"), { timeout: WAIT_MS, interval: 50 })
      .toSatisfy(({ done, total: t }) => t === total && done > 0 && done < total);
    const first = await progressOf(page, "leads");
    await page.getByTestId("throughput-chart").waitFor();
    await page.screenshot({ path: join(ARTIFACTS, "dashboard-run-in-progress.png"), fullPage: true });
    await expect.poll(async () => (await progressOf(page, "leads")).done, { timeout: WAIT_MS, interval: 50 }).toBeGreaterThan(first.done);
    expect(await page.locator('[data-testid="event-log"] li[data-type="map.progress"]').count()).toBeGreaterThan(0);

    expect(await untilStatus(page, ["completed", "failed", "cancelled"])).toBe("completed");
    await page.locator('[data-testid="event-log"] li[data-type="run.completed"]').waitFor();
    expect(await progressOf(page, "leads")).toEqual({ done: total, total });
    const run = await api.get(started.runId);
    expect(await page.getByTestId("run-result").textContent()).toContain(`"rows": ${(run.result as { rows: number }).rows}`);
    // Every ledger event is in the log, in order.
    const seqs = await page
      .locator('[data-testid="event-log"] li')
      .evaluateAll((items) => items.map((li) => Number(li.getAttribute("data-seq"))));
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
    expect(seqs.length).toBeGreaterThanOrEqual(3);
    if (run.usage.spend) {
      expect(await page.getByTestId("spend-total").textContent()).toContain(
        run.usage.spend.total.toLocaleString("en-US", { maximumFractionDigits: run.usage.spend.total >= 100 ? 0 : 2 }),
      );
    }
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: join(ARTIFACTS, "dashboard-run-finished.png"), fullPage: true });
  });

  it("pages the dataset preview", async () => {
    const rows = leads("paged", 25);
    const started = await api.submit({ play: "demo-enrich", input: { rows } });
    await openRun(page, started.runId);
    expect(await untilStatus(page, ["completed", "failed"])).toBe("completed");

    const keys = () =>
      page.locator('[data-testid="dataset-table"] tbody tr').evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-key")));
    await expect.poll(keys, { timeout: WAIT_MS }).toEqual(rows.slice(0, 10).map((r) => r.id));
    expect(await page.getByTestId("dataset-position").textContent()).toBe("rows 1–10");
    const failedRow = page.locator('[data-testid="dataset-table"] tr[data-key="paged-7"] td.status-failed');
    expect(await failedRow.textContent()).toBe("failed");

    await page.getByTestId("dataset-next").click();
    await expect.poll(keys, { timeout: WAIT_MS }).toEqual(rows.slice(10, 20).map((r) => r.id));
    await page.getByTestId("dataset-next").click();
    await expect.poll(keys, { timeout: WAIT_MS }).toEqual(rows.slice(20).map((r) => r.id));
    expect(await page.getByTestId("dataset-position").textContent()).toBe("rows 21–25");
    expect(await page.getByTestId("dataset-next").isDisabled()).toBe(true);
    await page.getByTestId("dataset-prev").click();
    await expect.poll(keys, { timeout: WAIT_MS }).toEqual(rows.slice(10, 20).map((r) => r.id));
    // The preview shows what the API holds.
    const fromApi: unknown[] = [];
    for await (const row of api.rows(started.runId, "leads", { pageSize: 100 })) fromApi.push(row);
    expect(fromApi.slice(10, 20).map((r) => (r as { _key: string })._key)).toEqual(await keys());
  });

  it("cancels a run in progress, then reruns it", async () => {
    const started = await api.submit({ play: "demo-enrich", input: { rows: leads("cancel", 2000) } });
    await openRun(page, started.runId);
    await expect.poll(async () => (await progressOf(page, "leads")).done, { timeout: WAIT_MS, interval: 50 }).toBeGreaterThan(0);
    expect(await page.getByTestId("rerun").isDisabled()).toBe(true);
    await page.getByTestId("cancel").click();
    expect(await untilStatus(page, ["cancelled", "completed", "failed"])).toBe("cancelled");
    expect((await api.get(started.runId)).status).toBe("cancelled");
    await page.locator('[data-testid="event-log"] li[data-type="run.cancelled"]').waitFor();
    // The counts it ended with (live counts held rows of chunks it never finished), and no rows in flight, rate or ETA.
    const ended = (await api.get(started.runId)).progress.maps.leads!;
    const endedBar = { done: ended.completed + ended.failed, total: ended.total };
    const endedStats = `${ended.completed.toLocaleString("en-US")} completed · ${ended.failed.toLocaleString("en-US")} failed`;
    const stats = () => page.locator('[data-map="leads"] .map-stats').textContent();
    await expect.poll(() => progressOf(page, "leads"), { timeout: WAIT_MS }).toEqual(endedBar);
    await expect.poll(stats, { timeout: WAIT_MS }).toBe(endedStats);
    // The same when the page is opened later: it replays the run's events from the first.
    await page.reload();
    await page.locator(`[data-testid="run-page"][data-run-id="${started.runId}"] [data-testid="run-status"]`).waitFor();
    await page.locator('[data-testid="event-log"] li[data-type="run.cancelled"]').waitFor();
    await expect.poll(() => progressOf(page, "leads"), { timeout: WAIT_MS }).toEqual(endedBar);
    await expect.poll(stats, { timeout: WAIT_MS }).toBe(endedStats);

    await expect.poll(() => page.getByTestId("rerun").isDisabled(), { timeout: WAIT_MS }).toBe(false);
    await page.getByTestId("rerun").click();
    await page.waitForURL((url) => url.hash.startsWith("#/runs/") && !url.hash.endsWith(started.runId));
    const rerunId = new URL(page.url()).hash.slice("#/runs/".length);
    await expect.poll(() => page.locator(`[data-testid="run-page"][data-run-id="${rerunId}"]`).count(), { timeout: WAIT_MS }).toBe(1);
    const rerun = await api.get(rerunId);
    expect(rerun).toMatchObject({ play: "demo-enrich" });
    // The rerun is the same work again; stop it here, there is nothing more to see.
    await api.cancel(rerunId);
    expect(await untilStatus(page, ["cancelled", "completed"])).toMatch(/cancelled|completed/);
  });

  it("starts a demo-approval run from the form, and signals it while it waits", async () => {
    await page.goto(`${BASE}/#/`);
    await page.getByTestId("start-play").selectOption("demo-approval");
    // The play's input schema, from GET /v1/plays, is shown beside the form.
    await expect.poll(() => page.locator("details pre.json").textContent(), { timeout: WAIT_MS }).toContain('"message"');
    await page.getByTestId("start-input").fill('{ "message": "ship the dashboard?" }');
    await page.getByTestId("start-submit").click();
    await page.waitForURL((url) => url.hash.startsWith("#/runs/run_"));
    const runId = new URL(page.url()).hash.slice("#/runs/".length);
    expect((await api.get(runId)).play).toBe("demo-approval");
    expect(await untilStatus(page, ["waiting"])).toBe("waiting");
    await page.locator('[data-testid="event-log"] li[data-type="log.appended"]', { hasText: "ship the dashboard?" }).waitFor();
    // The key the play waits for is filled in from its wait.started event.
    await expect.poll(() => page.getByTestId("signal-key").inputValue(), { timeout: WAIT_MS }).toBe("approve");
    await page.getByTestId("signal-data").fill('{ "ok": true, "by": "dashboard" }');
    await page.getByTestId("signal-send").click();
    expect(await untilStatus(page, ["completed", "failed"])).toBe("completed");
    expect(JSON.parse((await page.getByTestId("run-result").textContent()) ?? "null")).toEqual({ approved: { ok: true, by: "dashboard" } });
  });

  it("raised no error in the page", () => {
    expect(pageErrors).toEqual([]);
  });

  // Last: the browser logs the 404s it is shown here as console errors.
  it("says so for a run this org cannot see", async () => {
    await page.goto(`${BASE}/#/runs/run_00000000000000000000000000000000`);
    await page.getByTestId("run-not-found").waitFor();
    expect(await page.getByTestId("run-status").count()).toBe(0);
  });
});
