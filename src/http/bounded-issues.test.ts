import { describe, expect, it } from "vitest";
import { z } from "zod";
import { MAX_ISSUES } from "../core/errors";
import { issuesInParts, valuesUpTo, WHOLE_PARSE_VALUES } from "./bounded-issues";

const Person = z.object({ name: z.string().min(1) }).strict();
const Input = z.object({ teams: z.array(z.object({ id: z.string(), people: z.array(Person).max(100_000) })).optional() }).strict();
const people = (count: number, name: unknown) => Array.from({ length: count }, () => ({ name }));

describe("issuesInParts", () => {
  it("leaves a small value, or one whose schema does not split, to the whole parse", () => {
    expect(issuesInParts(Input, { teams: [{ id: "a", people: people(10, 0) }] })).toBeNull();
    expect(issuesInParts(z.unknown(), people(WHOLE_PARSE_VALUES, 0))).toBeNull();
    expect(
      issuesInParts(
        Input.transform((v) => v),
        { teams: [{ id: "a", people: people(WHOLE_PARSE_VALUES, 0) }] },
      ),
    ).toBeNull();
  });

  it("finds the first issues of a large value in parts, with their paths from its root, and stops", () => {
    const teams = [
      { id: "ok", people: people(30_000, "Ann") },
      { id: "bad", people: people(30_000, "") },
    ];
    const issues = issuesInParts(Input, { teams })!;
    expect(issues.length).toBeGreaterThanOrEqual(MAX_ISSUES);
    expect(issues.length).toBeLessThan(30_000);
    expect(issues[0]).toEqual({ path: ["teams", 1, "people", 0, "name"], message: expect.stringContaining(">=1 characters") });
    // A part too large is split again: the first team alone is past the limit, each of its people a part.
    const one = issuesInParts(Input, { teams: [{ id: "big", people: [...people(60_000, "Ann"), { name: "Bo", x: 1 }] }] })!;
    expect(one).toEqual([{ path: ["teams", 0, "people", 60_000], message: expect.stringContaining('"x"') }]);
  });

  it("answers no issue for a large value that fits, and one for an array past its max without walking its items", () => {
    expect(issuesInParts(Input, { teams: [{ id: "a", people: people(60_000, "Ann") }] })).toEqual([]);
    const capped = z.object({ list: z.array(z.string()).max(10) });
    expect(issuesInParts(capped, { list: Array(WHOLE_PARSE_VALUES + 5).fill(0) })).toEqual([
      { path: ["list"], message: expect.stringContaining("<=10") },
    ]);
  });
});

describe("valuesUpTo", () => {
  it("counts each object, array and scalar, and stops at the limit", () => {
    expect(valuesUpTo({ a: [1, 2], b: null }, 100)).toBe(5);
    expect(valuesUpTo(Array(1_000_000).fill([1, 2]), 1000)).toBe(1000);
  });
});
