import { describe, expect, it } from "vitest";
import { z } from "zod";
import { receiptKey } from "../runtime/tools/receipt-keys";
import { canonicalJson } from "./hash";

describe("canonicalJson", () => {
  it("sorts keys at every level and drops undefined fields, as JSON would", () => {
    expect(canonicalJson({ b: 1, a: { d: [2, { f: 3, e: undefined }], c: null } })).toBe('{"a":{"c":null,"d":[2,{"f":3}]},"b":1}');
  });

  it("writes a key __proto__ as a key: two inputs differing only in it get two receipt keys", () => {
    const parsed = JSON.parse('{"__proto__":{"a":1},"b":2}');
    expect(canonicalJson(parsed)).toBe('{"__proto__":{"a":1},"b":2}');
    expect(canonicalJson(JSON.parse('{"__proto__":{"a":1}}'))).not.toBe(canonicalJson(JSON.parse('{"__proto__":{"a":2}}')));
    expect(canonicalJson(JSON.parse('{"__proto__":{"a":1}}'))).not.toBe(canonicalJson({}));
  });

  it("writes a Date as its ISO string, so two inputs differing only in a date get two receipt keys", async () => {
    expect(canonicalJson({ since: new Date("2020-01-01T00:00:00Z") })).toBe('{"since":"2020-01-01T00:00:00.000Z"}');
    // A tool input parsed with z.coerce.date(): the two calls were one receipt (the second reused the first's output).
    const schema = z.object({ domain: z.string(), since: z.coerce.date() });
    const base = { org: "dev", toolId: "t", toolVersion: "1", authScope: "s" };
    const a = await receiptKey({ ...base, input: schema.parse({ domain: "x.test", since: "2020-01-01" }) });
    const b = await receiptKey({ ...base, input: schema.parse({ domain: "x.test", since: "2025-06-30" }) });
    expect(a).not.toBe(b);
    expect(await receiptKey({ ...base, input: schema.parse({ domain: "x.test", since: "2025-06-30" }) })).toBe(b);
  });

  it("refuses a Map, a Set or a class instance (JSON writes each as {}, making different values one key)", () => {
    expect(() => canonicalJson({ tags: new Map([["a", 1]]) })).toThrow(/Map is not JSON/);
    expect(() => canonicalJson([new Set([1])])).toThrow(/Set is not JSON/);
    class Point {
      constructor(readonly x: number) {}
    }
    expect(() => canonicalJson({ at: new Point(1) })).toThrow(/Point is not JSON/);
    expect(canonicalJson(Object.assign(Object.create(null), { b: 2, a: 1 }))).toBe('{"a":1,"b":2}');
    // A typed array keeps the key it had (its elements by index, as JSON writes it); a toJSON returning itself is plain.
    expect(canonicalJson({ bytes: new Uint8Array([1, 2, 3]) })).toBe('{"bytes":{"0":1,"1":2,"2":3}}');
    expect(
      canonicalJson({
        self: {
          a: 1,
          toJSON() {
            return this;
          },
        },
      }),
    ).toBe('{"self":{"a":1}}');
    class Self {
      a = 1;
      toJSON() {
        return this;
      }
    }
    expect(canonicalJson({ self: new Self() })).toBe('{"self":{"a":1}}');
  });
});
