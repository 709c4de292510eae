import { describe, expect, it } from "vitest";
import { REDACTED, Redactor, secretsFromEnv } from "./redact";

describe("secretsFromEnv", () => {
  it("collects *_KEY, *_TOKEN and *_SECRET values and the API_TOKENS tokens", () => {
    const env = {
      SIM_API_KEY: "sim-key-value-1",
      GITHUB_TOKEN: "gh-token-value-2",
      WEBHOOK_SECRET: "whsec-value-3",
      API_TOKENS: JSON.stringify({ "org-a-token-xyz": "a" }),
      SIM_PROVIDER: "on",
      KEY_COUNT: "12345678",
      RUN_COORDINATOR: { not: "a string" },
    };
    expect(secretsFromEnv(env).sort()).toEqual(["gh-token-value-2", "org-a-token-xyz", "sim-key-value-1", "whsec-value-3"]);
  });

  it("ignores an API_TOKENS that is not JSON", () => {
    expect(secretsFromEnv({ API_TOKENS: "{nope" })).toEqual([]);
  });
});

describe("Redactor", () => {
  const redactor = new Redactor({ secrets: ["sim-key-value-1", "short", "sim-key-value-1-longer"] });

  it("replaces known secret values, longest first", () => {
    expect(redactor.redact("key sim-key-value-1-longer and sim-key-value-1.")).toBe(`key ${REDACTED} and ${REDACTED}.`);
  });

  it("does not match secrets too short to be distinctive", () => {
    expect(redactor.redact("a short line")).toBe("a short line");
  });

  it("redacts bearer tokens and key=value credentials", () => {
    expect(redactor.redact("Authorization: Bearer abc.DEF-123")).toBe(`Authorization: Bearer ${REDACTED}`);
    expect(redactor.redact("GET /x?api_key=abc123&page=2")).toBe(`GET /x?api_key=${REDACTED}&page=2`);
    expect(redactor.redact('{"token": "t0p"}')).toBe(`{"token": "${REDACTED}"}`);
    expect(redactor.redact("password=hunter2 ok")).toBe(`password=${REDACTED} ok`);
  });

  it("redacts tokens of well-known shapes", () => {
    for (const token of [
      "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
      "sk_test_abcdefgh12345678",
      "ghp_0123456789abcdefghijABCDEFGHIJ",
      "xoxb-1234567890-abcdefghij",
      "AKIAIOSFODNN7EXAMPLE",
      "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ]) {
      expect(redactor.redact(`using ${token} now`), token).toBe(`using ${REDACTED} now`);
    }
  });

  it("redacts long high-entropy tokens but keeps hashes, ids and prose", () => {
    expect(redactor.redact("key Zk3pQ9vX2mL7wR4tY8bN1cF6hJ0dS5gA")).toBe(`key ${REDACTED}`);
    const kept = [
      "run_0123456789abcdef0123456789abcdef",
      "r:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
      "123e4567-e89b-12d3-a456-426614174000",
      "chunk items#3: 50 rows were written by a newer attempt; retrying the chunk",
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaAAAA1111",
    ];
    for (const line of kept) expect(redactor.redact(line)).toBe(line);
  });

  it("redacts every string inside a JSON value", () => {
    const error = {
      code: "tool_error",
      message: "401 for Bearer abc",
      failureSamples: [{ key: "k1", error: "bad key sim-key-value-1" }],
      count: 2,
    };
    expect(redactor.redactDeep(error)).toEqual({
      code: "tool_error",
      message: `401 for Bearer ${REDACTED}`,
      failureSamples: [{ key: "k1", error: `bad key ${REDACTED}` }],
      count: 2,
    });
  });

  it("works without any known secrets", () => {
    expect(new Redactor({ secrets: [] }).redact("Bearer x")).toBe(`Bearer ${REDACTED}`);
  });
});
