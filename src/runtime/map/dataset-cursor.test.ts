import { describe, expect, it } from "vitest";
import { decodeDatasetCursor, encodeDatasetCursor } from "./dataset-cursor";

const scope = { runId: "run_0123456789abcdef0123456789abcdef", dataset: "leads" };

describe("dataset cursors", () => {
  it("are base64url and give back the index they were made for", () => {
    for (const index of [0, 1, 999, 9_999_999]) {
      const cursor = encodeDatasetCursor(scope, index);
      expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/);
      expect(decodeDatasetCursor(cursor, scope, 10_000_000)).toBe(index);
    }
  });

  it("are refused for another run or another dataset", () => {
    const cursor = encodeDatasetCursor(scope, 5);
    for (const other of [
      { ...scope, runId: "run_ffffffffffffffffffffffffffffffff" },
      { ...scope, dataset: "accounts" },
    ]) {
      expect(() => decodeDatasetCursor(cursor, other, 100)).toThrow(expect.objectContaining({ code: "invalid_cursor", httpStatus: 400 }));
    }
  });

  it("are refused past the end of the dataset", () => {
    expect(() => decodeDatasetCursor(encodeDatasetCursor(scope, 100), scope, 100)).toThrow(/past the end/);
  });

  it("refuse anything this API did not give out, with code invalid_cursor naming the field", () => {
    const forged = (body: unknown) => btoa(JSON.stringify(body)).replace(/=+$/, "");
    for (const cursor of [
      "",
      "not a cursor!",
      "%%%",
      "a",
      "x".repeat(500),
      btoa("not json"),
      forged({ v: 2, s: "x", i: 1 }),
      forged({ v: 1, s: "x", i: -1 }),
      forged({ v: 1, s: "x", i: 1.5 }),
      forged([1, 2]),
      forged(null),
    ]) {
      let thrown: unknown;
      try {
        decodeDatasetCursor(cursor, scope, 100);
      } catch (error) {
        thrown = error;
      }
      expect(thrown, cursor).toMatchObject({ code: "invalid_cursor", httpStatus: 400, details: [{ path: "cursor" }] });
    }
  });
});
