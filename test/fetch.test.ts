import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { FAULT_OBJECT_NAME } from "../src/clients/faults";
import { clearFaults, crash, setFaults } from "./chaos-helpers";
import { allEvents, apiJson, datasetRows, expectedEmail, simReset, simStats, startRun, waitForRun } from "./helpers";

let unique = 0;
const id = () => `u${Date.now().toString(36)}${unique++}`;

/** Every class of address a play must not reach, with the code `ctx.fetch` refuses it with. */
const REFUSED: [string, string, string][] = [
  ["ftp scheme", "ftp://example.com/x", "egress_forbidden_scheme"],
  ["file scheme", "file:///etc/passwd", "egress_forbidden_scheme"],
  ["credentials in the URL", "http://user:pw@example.com/", "egress_forbidden_url"],
  ["loopback", "http://127.0.0.1:8787/", "egress_forbidden_address"],
  ["loopback, decimal", "http://2130706433/", "egress_forbidden_address"],
  ["loopback, hex", "http://0x7f000001/", "egress_forbidden_address"],
  ["loopback, octal", "http://0177.0.0.1/", "egress_forbidden_address"],
  ["unspecified", "http://0.0.0.0/", "egress_forbidden_address"],
  ["private 10/8", "http://10.1.2.3/", "egress_forbidden_address"],
  ["private 172.16/12", "http://172.31.255.255/", "egress_forbidden_address"],
  ["private 192.168/16", "http://192.168.1.1/", "egress_forbidden_address"],
  ["shared CGNAT", "http://100.64.0.1/", "egress_forbidden_address"],
  ["link-local metadata", "http://169.254.169.254/latest/meta-data/", "egress_forbidden_address"],
  ["multicast", "http://224.0.0.1/", "egress_forbidden_address"],
  ["broadcast", "http://255.255.255.255/", "egress_forbidden_address"],
  ["IPv6 loopback", "http://[::1]/", "egress_forbidden_address"],
  ["IPv6 unspecified", "http://[::]/", "egress_forbidden_address"],
  ["IPv4-mapped loopback", "http://[::ffff:127.0.0.1]/", "egress_forbidden_address"],
  ["NAT64 private", "http://[64:ff9b::10.0.0.1]/", "egress_forbidden_address"],
  ["IPv6 unique local", "http://[fd00:ec2::254]/", "egress_forbidden_address"],
  ["IPv6 link-local", "http://[fe80::1]/", "egress_forbidden_address"],
  ["IPv6 multicast", "http://[ff02::1]/", "egress_forbidden_address"],
  ["IPv4-translated loopback", "http://[::ffff:0:7f00:1]/", "egress_forbidden_address"],
  ["local-use NAT64 loopback", "http://[64:ff9b:1::7f00:1]/", "egress_forbidden_address"],
  ["6to4 loopback", "http://[2002:7f00:1::]/", "egress_forbidden_address"],
  ["localhost", "http://localhost/", "egress_forbidden_address"],
  ["a localhost subdomain", "http://api.localhost/", "egress_forbidden_address"],
  ["cloud metadata name", "http://metadata.google.internal/", "egress_forbidden_address"],
  ["mDNS name", "http://printer.local/", "egress_forbidden_address"],
  ["a public name resolving to loopback", "http://localtest.me/", "egress_forbidden_address"],
  ["a wildcard-DNS name carrying an address", "http://127.0.0.1.nip.io/", "egress_forbidden_address"],
  ["not a URL", "not a url", "egress_invalid_url"],
];

describe("ctx.fetch", () => {
  it("refuses every forbidden address class, from rows and from the play", async () => {
    const rows = REFUSED.map(([, url], i) => ({ id: `${id()}-${i}`, url }));
    const run = await waitForRun(await startRun("test-fetch", { rows, playUrl: "http://169.254.169.254/latest/meta-data/iam/" }));
    expect(run.status).toBe("completed");
    expect(run.result.playLevel).toMatchObject({ ok: false, code: "egress_forbidden_address" });
    const stored = await datasetRows(run.runId, "fetches");
    expect(stored.map((r) => [r.url, r.outcome.code])).toEqual(REFUSED.map(([, url, code]) => [url, code]));
    for (const row of stored) expect(row.outcome.ok).toBe(false);
  });

  it("applies the org's EGRESS_ALLOWLIST", async () => {
    const rows = [
      { id: id(), url: "https://elsewhere.example/data" },
      { id: id(), url: "http://10.0.0.1/" },
    ];
    const started = await apiJson("/v1/runs", { method: "POST", json: { play: "test-fetch", input: { rows } }, token: "other-token" });
    const run = await waitForRun(started.body.runId, { token: "other-token" });
    const { body } = await apiJson(`/v1/runs/${run.runId}/datasets/fetches`, { token: "other-token" });
    expect(body.rows.map((r: any) => r.outcome.code)).toEqual(["egress_host_not_allowed", "egress_forbidden_address"]);
    expect(body.rows[0].outcome.message).toContain("elsewhere.example is not on this org's egress allowlist");
  });

  it("keeps the values of secret headers out of log lines and errors", async () => {
    const bearer = `tok${id()}Zq9`;
    const apiKey = `hunter2-${id()}`;
    const headers = { Authorization: `Bearer ${bearer}`, "X-Api-Key": apiKey, Accept: "application/json" };
    const run = await waitForRun(
      await startRun("test-fetch", {
        rows: [{ id: id(), url: "http://[::1]/admin" }],
        headers,
        playUrl: "http://127.0.0.1/",
        logHeaders: true,
      }),
    );
    expect(run.status).toBe("completed");
    const logs = (await allEvents(run.runId)).filter((e) => e.type === "log.appended").map((e) => e.line);
    expect(logs.filter((line) => line.includes("fetch failed with headers"))).toHaveLength(2);
    for (const line of logs) {
      expect(line).not.toContain(bearer);
      expect(line).not.toContain(apiKey);
    }
    expect(logs.some((line) => line.includes("application/json") && line.includes("[REDACTED]"))).toBe(true);
    const stored = JSON.stringify(await datasetRows(run.runId, "fetches")) + JSON.stringify(run.result);
    expect(stored).not.toContain(bearer);
    expect(stored).not.toContain(apiKey);
  });

  it.each([
    ["in executors", {}],
    ["in the coordinator", { testPolicy: { maxExecutors: 0 } }],
  ])("keeps them out of a failed row's stored error (%s)", async (_where, options) => {
    // Values only the fetch knows are secret: no pattern of the deployment's redactor matches them.
    const signature = `sig-${id()}`;
    const session = `sess-${id()}`;
    const headers = { "X-Partner-Signature": signature, "X-Session-Id": session };
    const rows = [{ id: id(), url: "http://[::1]/admin" }];
    const run = await waitForRun(await startRun("test-fetch", { rows, headers, throwHeaders: "rows" }, options));
    expect(run.result).toMatchObject({ failed: 1 });
    const [row] = await datasetRows(run.runId, "fetches");
    expect(row._error).toMatch(/^refused with headers /);
    expect(row._error).toContain("[REDACTED]");
    expect(row._error).not.toContain(signature);
    expect(row._error).not.toContain(session);
  });

  it("keeps them out of the run's error when the play throws one quoting them", async () => {
    const signature = `sig-${id()}`;
    const headers = { "X-Partner-Signature": signature };
    const run = await waitForRun(await startRun("test-fetch", { rows: [], headers, playUrl: "http://127.0.0.1/", throwHeaders: "play" }));
    expect(run.status).toBe("failed");
    expect(run.error.message).toContain("refused with headers [REDACTED]");
    const ended = (await allEvents(run.runId)).find((e) => e.type === "run.failed");
    expect(JSON.stringify(ended)).toContain("refused with headers [REDACTED]");
    expect(JSON.stringify(ended)).not.toContain(signature);
  });

  it("keeps them out of the run's error when the next invocation carries out the end the play decided", async () => {
    const signature = `sig-${id()}`;
    // Held once the failed end is decided (and kept): the invocation dies there, and the next one ends the run.
    await setFaults([{ point: "run.finish", hold: true, times: 1, play: "test-fetch" }]);
    const faults = env.FAULTS!.getByName(FAULT_OBJECT_NAME);
    const input = { rows: [], headers: { "X-Partner-Signature": signature }, playUrl: "http://127.0.0.1/", throwHeaders: "play" };
    const runId = await startRun("test-fetch", input);
    try {
      await faults.held(0);
      await crash(env.RUN_COORDINATOR.getByName(runId));
    } finally {
      await clearFaults();
      await faults.release(0);
    }
    const run = await waitForRun(runId);
    expect(run.status).toBe("failed");
    expect(run.error.message).toContain("refused with headers [REDACTED]");
    expect(JSON.stringify((await allEvents(runId)).find((e) => e.type === "run.failed"))).not.toContain(signature);
  });
});

describe("a map over rows a play-level ctx.fetch returned", () => {
  /**
   * A list of `count` leads served at a URL of its own: each fetch of it answers the same rows with the next
   * `version`; every other request goes out as before.
   */
  function servedList(count: number) {
    const url = `https://lists.example.com/${id()}.json`;
    const batch = id();
    const rows = Array.from({ length: count }, (_, i) => ({ id: `${batch}-${i}`, name: `Listed ${batch} ${i}`, domain: "example.com" }));
    const real = globalThis.fetch;
    let fetches = 0;
    const spy = vi.spyOn(globalThis, "fetch").mockImplementation((input, init) => {
      if (String(input instanceof Request ? input.url : input) !== url) return real(input, init);
      fetches++;
      return Promise.resolve(Response.json({ version: fetches, rows }));
    });
    return { url, rows, fetches: () => fetches, restore: () => spy.mockRestore() };
  }

  it("runs in executors, which replay the response the play got instead of fetching again", async () => {
    await simReset();
    const { url, rows, fetches, restore } = servedList(120);
    try {
      const run = await waitForRun(await startRun("test-fetched-list", { url }));
      expect(run.status).toBe("completed");
      expect(run.result).toEqual({ completed: 120, failed: 0 });
      const stored = new Map((await datasetRows(run.runId, "listed")).map((row) => [row._key, row]));
      for (const row of rows)
        expect(stored.get(row.id)).toMatchObject({ _status: "completed", email: expectedEmail(row.name, row.domain) });
      // Its three chunks' calls went out from executors, not from the coordinator's six connections.
      const callers = Object.keys((await simStats()).maxInFlightByCaller);
      expect(callers.length).toBeGreaterThan(0);
      expect(callers.every((caller) => caller.startsWith(`MapExecutor:${run.runId}#`))).toBe(true);
      // Every row saw an answer the coordinator's play got (executors fetched nothing themselves).
      expect(fetches()).toBeGreaterThan(0);
      for (const row of rows) expect(stored.get(row.id).version).toBeLessThanOrEqual(fetches());
      const lines = (await allEvents(run.runId)).flatMap((e) => (e.type === "log.appended" ? [e.line] : []));
      expect(lines.filter((line) => line.includes("runs in the coordinator"))).toEqual([]);
    } finally {
      restore();
    }
  });

  it("gets each invocation's own answer: executors never replay an earlier invocation's response", async () => {
    await simReset();
    const { url, fetches, restore } = servedList(150);
    try {
      // A budget of a few subrequests: the coordinator yields after each chunk or so, and each invocation fetches anew.
      const run = await waitForRun(await startRun("test-fetched-list", { url }, { testPolicy: { invocationSubrequestBudget: 5 } }));
      expect(run.status).toBe("completed");
      expect(fetches()).toBeGreaterThan(1);
      const versions = new Set((await datasetRows(run.runId, "listed")).map((row) => row.version));
      // Rows computed after the first invocation carry a later answer: the executors (the same objects) asked again.
      expect(Math.max(...versions)).toBeGreaterThan(1);
    } finally {
      restore();
    }
  });
});
