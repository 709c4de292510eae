import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { simFindEmail } from "../tools/sim-tools";
import { defineTool, rowsInput, toolEnv } from "./define";

describe("toolEnv", () => {
  it("hands a tool the bindings it declared and none of the others", () => {
    const seen = toolEnv(simFindEmail, env);
    expect(Object.keys(seen).sort()).toEqual(["SIM", "SIM_API_KEY"]);
    expect(seen.SIM).toBe(env.SIM);
    // The coordinator, the shards and the org directory stay out of reach.
    expect("RUN_COORDINATOR" in seen || "SHEET_SHARD" in seen || "ORG_DIRECTORY" in seen || "API_TOKENS" in seen).toBe(false);
    expect(Object.isFrozen(seen)).toBe(true);
  });

  it("hands a tool that declared nothing an empty env", () => {
    const bare = defineTool({ id: "bare", provider: "none", version: "1", input: simFindEmail.input, execute: async () => null });
    expect(toolEnv(bare, env)).toEqual({});
  });
});

describe("rowsInput over CSV text", () => {
  const input = rowsInput(z.object({}).loose());
  /** The message the refusal of `csv` gives. */
  const refusal = (csv: string) => {
    const parsed = input.safeParse({ csv });
    expect(parsed.success, csv).toBe(false);
    return parsed.error!.issues.map((issue) => issue.message).join("; ");
  };

  it("names the line a refused row starts on, counting a quoted CRLF once, as an upload names it", () => {
    // Line 1 the header, lines 2-3 a row holding a quoted CRLF, line 4 a row, line 5 the one refused.
    const before = 'id,name\r\n1,"a\r\nb"\r\n2,c\r\n';
    expect(refusal(`${before}3\r\n`)).toBe("CSV does not parse: line 5: this row has 1 field, the header (line 1) has 2 columns");
    expect(refusal(`${before}3,"x"y\r\n`)).toMatch(/^CSV does not parse: line 5: Invalid Closing Quote: got "y" instead of/);
    // csv-parse finds the quote unclosed where the text ends: the row starts on line 5.
    expect(refusal(`${before}3,"x\r\n\r\n`)).toMatch(/^CSV does not parse: line 5: Quote Not Closed/);
    const long = `${before}3,"${"x\r\n".repeat(100_000)}"\r\n`;
    expect(refusal(long)).toBe("CSV does not parse: line 5: this row is longer than 65536 bytes, the most one row may hold");
    // Blank lines, a byte-order mark and characters of several bytes before it.
    expect(refusal('\ufeff\r\nid,name\r\n\r\n1,"é\r\n€"\r\n\r\n2\r\n')).toMatch(/^CSV does not parse: line 7: /);
    expect(refusal('id,name\r1,"a\r\n\nb"\r2\r')).toMatch(/^CSV does not parse: line 5: /);
    expect(refusal("\r\n\nid,name\r\n1\r\n")).toBe("CSV does not parse: line 4: this row has 1 field, the header (line 3) has 2 columns");
  });

  it("still takes quoted line breaks of every kind, and a header after blank lines", () => {
    const parsed = input.safeParse({ csv: '\r\n\nid,name\r\n1,"a\r\nb"\r2,"c\rd"\n' });
    expect(parsed.success && parsed.data.rows).toEqual([
      { id: "1", name: "a\r\nb" },
      { id: "2", name: "c\rd" },
    ]);
  });
});
