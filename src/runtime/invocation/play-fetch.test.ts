import { describe, expect, it } from "vitest";
import { ChildWaiters, childOutcome } from "./child-plays";
import { egressPolicyFor, PlayFetch, SecretValues } from "./play-fetch";

const envWith = (allowlist?: string) => ({ EGRESS_ALLOWLIST: allowlist }) as unknown as Env;

describe("egressPolicyFor", () => {
  it("gives an org its own hosts, else the '*' entry, else no allowlist", () => {
    const env = envWith(JSON.stringify({ acme: ["API.example.com", "*.acme.test"], "*": ["public.example"] }));
    expect(egressPolicyFor(env, "acme").allowHosts).toEqual(["api.example.com", "*.acme.test"]);
    expect(egressPolicyFor(env, "other").allowHosts).toEqual(["public.example"]);
    expect(egressPolicyFor(envWith(JSON.stringify({ acme: [] })), "other").allowHosts).toBeNull();
    expect(egressPolicyFor(envWith(undefined), "acme").allowHosts).toBeNull();
  });

  it("refuses a malformed allowlist with egress_misconfigured", () => {
    expect(() => egressPolicyFor(envWith("{nope"), "acme")).toThrow(expect.objectContaining({ code: "egress_misconfigured" }));
    expect(() => egressPolicyFor(envWith(JSON.stringify({ acme: "host" })), "acme")).toThrow(
      expect.objectContaining({ code: "egress_misconfigured" }),
    );
  });
});

describe("SecretValues", () => {
  it("redacts the values of secret headers, and a bearer token alone", () => {
    const secrets = new SecretValues();
    secrets.addHeaders({ Authorization: "Bearer abc123token", "X-Api-Key": "hunter2hunter2", Accept: "application/json", Cookie: "s=1" });
    expect(secrets.redact("sent Bearer abc123token, then abc123token and hunter2hunter2 as application/json with s=1")).toBe(
      "sent [REDACTED], then [REDACTED] and [REDACTED] as application/json with s=1",
    );
  });

  it("redacts values with pattern characters literally, the longest first, and values added after a redaction", () => {
    const secrets = new SecretValues();
    secrets.addHeaders({ "X-Signature": "a+b.c*d$1", "X-Session-Id": "a+b.c*d$1-long" });
    expect(secrets.redact("a+b.c*d$1-long and a+b.c*d$1 but not aXb.c*d$1")).toBe("[REDACTED] and [REDACTED] but not aXb.c*d$1");
    secrets.addHeaders({ "X-Api-Key": "later-key-1" });
    expect(secrets.redact("later-key-1 a+b.c*d$1")).toBe("[REDACTED] [REDACTED]");
  });

  it("redacts all of an earlier value that contains a value added since its pattern was built", () => {
    const secrets = new SecretValues();
    secrets.addHeaders({ Cookie: "session=abc123456; csrf=xyz987654" });
    expect(secrets.redact("nothing secret")).toBe("nothing secret");
    secrets.addHeaders({ "X-CSRF-Token": "xyz987654" });
    expect(secrets.redact("sent session=abc123456; csrf=xyz987654 and xyz987654")).toBe("sent [REDACTED] and [REDACTED]");
  });

  it("redacts every value of a run that adds one per row, between and across its pattern's rebuilds", () => {
    const secrets = new SecretValues();
    for (let row = 0; row < 500; row++) {
      secrets.addHeaders({ "X-Request-Signature": `sig-${row}-${"x".repeat(row % 7)}` });
      // Each row's line quotes its own signature and the first row's.
      const line = `row ${row} sent sig-${row}-${"x".repeat(row % 7)} after sig-0-`;
      expect(secrets.redact(line)).toBe(`row ${row} sent [REDACTED] after [REDACTED]`);
    }
  });
});

describe("PlayFetch", () => {
  it("refuses before any request and keeps secret header values out of the error", async () => {
    const secrets = new SecretValues();
    const fetcher = new PlayFetch({ env: envWith(undefined), org: "acme", signal: new AbortController().signal, secrets });
    await expect(fetcher.fetch("http://10.0.0.1/hunter2hunter2", { headers: { "X-Api-Key": "hunter2hunter2" } })).rejects.toMatchObject({
      code: "egress_forbidden_address",
    });
    await expect(fetcher.fetch("http://user:hunter2hunter2@example.com/")).rejects.toMatchObject({ code: "egress_forbidden_url" });
    expect(secrets.redact("key hunter2hunter2")).toBe("key [REDACTED]");
  });
});

describe("child plays' pure parts", () => {
  it("maps a child's end to the parent's outcome", () => {
    expect(childOutcome("p", { childRunId: "run_x", status: "completed", result: { a: 1 }, error: null })).toEqual({
      state: "done",
      result: { a: 1 },
    });
    expect(
      childOutcome("p", { childRunId: "run_x", status: "failed", result: null, error: { code: "boom", message: "it broke" } }),
    ).toEqual({
      state: "failed",
      error: { code: "child_failed", message: "child play p (run_x) failed: boom: it broke" },
    });
    expect(childOutcome("p", { childRunId: "run_x", status: "cancelled", result: null, error: null }).state).toBe("failed");
  });

  it("wakes in-process waiters on notify, after their time, or rejects them on abort", async () => {
    const waiters = new ChildWaiters();
    const controller = new AbortController();
    const notified = waiters.wait("run_a", 60_000, controller.signal);
    waiters.notify("run_a");
    await expect(notified).resolves.toBeUndefined();
    await expect(waiters.wait("run_b", 5, controller.signal)).resolves.toBeUndefined();
    const aborted = waiters.wait("run_c", 60_000, controller.signal);
    controller.abort(new Error("stop"));
    await expect(aborted).rejects.toThrow("stop");
  });
});
