import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import type { DatasetExporter, ExportPartRequest } from "../src/actors/DatasetExporter";
import { parse } from "csv-parse/sync";
import { describe, expect, it } from "vitest";
import { SheetClient } from "../src/clients/shards";
import { SubrequestMeter } from "../src/core/meter";
import { policyFor } from "../src/core/policy";
import { rowPagesInOrder } from "../src/runtime/map/dataset-view";
import { clearFaults, setFaults } from "./chaos-helpers";
import { api, startRun, waitForRun } from "./helpers";

const PADDED = 150_000;

/** A completed run of `test-padded` whose stored rows (46 MB in all) take several rounds of reads to export. */
async function paddedRun() {
  const prefix = `parts-${Date.now().toString(36)}`;
  const rows = Array.from({ length: 360 }, (_, i) => ({
    id: `${prefix}-${i}`,
    label: i % 9 === 0 ? `Quote "${i}", with\nnewline` : `row ${i}`,
    chars: i % 7 === 0 ? 3 : PADDED,
  }));
  const run = await waitForRun(await startRun("test-padded", { rows }), { timeoutMs: 120_000 });
  expect(run.status).toBe("completed");
  const found = await env.RUN_COORDINATOR.getByName(run.runId).dataset("dev", "padded");
  expect(found).not.toBeNull();
  return { runId: run.runId as string, rows, location: found!.location, total: found!.total };
}

/** Reads a part's bytes as text, and where the next part starts; then lets the part's stub go. */
async function readPart(part: { body: ReadableStream<Uint8Array>; next(): Promise<number | null> } & Disposable) {
  try {
    const text = await new Response(part.body).text();
    return { text, next: await part.next() };
  } finally {
    part[Symbol.dispose]();
  }
}

describe("a dataset export written in parts, each in an invocation of its own", () => {
  it("a part stops after its rounds of reads and says where the rest starts; the parts hold every row once, in order", async () => {
    const { runId, rows, location, total } = await paddedRun();
    // What the route's test policy asks of each part: one round of reads (a call per shard at most).
    expect(policyFor(env).exportPartRounds).toBe(1);

    // The rounds directly: each part reads at most a call per shard, and the next part continues where it said.
    const keys: string[] = [];
    let reads = 0;
    let parts = 0;
    for (let from: number | null = 0; from !== null; parts++) {
      const meter = new SubrequestMeter();
      const pages = rowPagesInOrder(new SheetClient({ env, location, meter }), runId, total, { fromIndex: from, maxRounds: 1 });
      for (;;) {
        const page = await pages.next();
        if (page.done) {
          from = page.value;
          break;
        }
        keys.push(...page.value.map((row) => String(row._key)));
      }
      expect(meter.rpc).toBeLessThanOrEqual(location.shardCount);
      reads += meter.rpc;
    }
    expect(keys).toEqual(rows.map((row) => row.id));
    // 46 MB of rows at about 16 Mi characters a round: at least three parts.
    expect(parts).toBeGreaterThanOrEqual(3);
    expect(reads).toBeGreaterThanOrEqual(parts);

    // The exporter object: each part's bytes, then where the next starts, until null.
    const exporter = env.DATASET_EXPORTER.getByName(`${runId}/padded/${crypto.randomUUID()}`);
    const lines: Record<string, unknown>[] = [];
    let objectParts = 0;
    for (let from: number | null = 0; from !== null; objectParts++) {
      const part = await readPart(
        await exporter.exportPart({ location, runId, total, fromIndex: from, maxRounds: 1, format: { format: "ndjson" } }),
      );
      expect(part.text.endsWith("\n")).toBe(true);
      lines.push(
        ...part.text
          .trimEnd()
          .split("\n")
          .map((line) => JSON.parse(line)),
      );
      if (part.next !== null) expect(part.next).toBeGreaterThan(from);
      from = part.next;
    }
    expect(objectParts).toBe(parts);
    expect(lines.map((row) => row._key)).toEqual(rows.map((row) => row.id));
    expect(lines).toEqual(
      rows.map((row) => ({ ...row, padding: "x".repeat(row.chars), _key: row.id, _status: "completed", _error: null })),
    );

    // A part past the last row is empty and ends the export.
    const past = await readPart(
      await exporter.exportPart({ location, runId, total, fromIndex: total, maxRounds: 1, format: { format: "ndjson" } }),
    );
    expect(past).toEqual({ text: "", next: null });
  });

  it("GET ?format=csv and ?format=ndjson stitch the parts into one download: every row once, in order, every cell as stored", async () => {
    const { runId, rows } = await paddedRun();

    const csv = await api(`/v1/runs/${runId}/datasets/padded?format=csv`);
    expect(csv.status).toBe(200);
    expect(csv.headers.get("Content-Disposition")).toBe('attachment; filename="padded.csv"');
    const parsed = parse(await csv.text(), { columns: true }) as Record<string, string>[];
    expect(Object.keys(parsed[0]!)).toEqual(["id", "label", "chars", "padding", "_key", "_status", "_error"]);
    expect(parsed).toEqual(
      rows.map((row) => ({
        id: row.id,
        label: row.label,
        chars: String(row.chars),
        padding: "x".repeat(row.chars),
        _key: row.id,
        _status: "completed",
        _error: "",
      })),
    );

    const ndjson = await api(`/v1/runs/${runId}/datasets/padded?format=ndjson`);
    expect(ndjson.status).toBe(200);
    const lines = (await ndjson.text())
      .trimEnd()
      .split("\n")
      .map((line) => JSON.parse(line));
    expect(lines.map((row) => row._key)).toEqual(rows.map((row) => row.id));
    expect(lines.map((row) => row.padding.length)).toEqual(rows.map((row) => row.chars));
  });

  it("a part that fails before the first byte is an error response; one that fails later errors the download, never ends it cleanly", async () => {
    const { runId } = await paddedRun();
    try {
      await setFaults([{ point: "export.part", fromCall: 1, times: 1 }]);
      const refused = await api(`/v1/runs/${runId}/datasets/padded?format=csv`);
      expect(refused.status).toBe(500);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("injected_fault");

      // The second part fails: the first part's rows came (status 200, bytes sent), then the body errors.
      await setFaults([{ point: "export.part", fromCall: 2, times: 1 }]);
      const cut = await api(`/v1/runs/${runId}/datasets/padded?format=ndjson`);
      expect(cut.status).toBe(200);
      const reader = cut.body!.getReader();
      let bytes = 0;
      const outcome = await (async () => {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return "ended";
          bytes += value.byteLength;
        }
      })().catch(() => "errored");
      expect(outcome).toBe("errored");
      expect(bytes).toBeGreaterThan(0);
    } finally {
      await clearFaults();
    }
    // With the fault gone, the same export is whole.
    const whole = await api(`/v1/runs/${runId}/datasets/padded?format=ndjson`);
    expect((await whole.text()).trimEnd().split("\n")).toHaveLength(360);
  });

  it("refuses a part asked for with a bad request, naming what is wrong", async () => {
    const exporter = env.DATASET_EXPORTER.getByName(`bad/${crypto.randomUUID()}`);
    const location = { org: "dev", play: "test-padded", dataset: "padded", shardCount: 4 };
    const base = { location, runId: "run_x", total: 10, fromIndex: 0, maxRounds: 1, format: { format: "ndjson" as const } };
    // Inside the object: a rejection through a stub leaks an unhandled rejection under the test pool (see sheet-shard.test.ts).
    const refusal = (request: ExportPartRequest) =>
      runInDurableObject(exporter, (instance: DatasetExporter) =>
        instance.exportPart(request).then(
          () => "resolved",
          (error: unknown) => String((error as Error).message),
        ),
      );
    expect(await refusal({ ...base, fromIndex: -1 })).toMatch(/^fromIndex: /);
    expect(await refusal({ ...base, format: { format: "csv", columns: [], escapeFormulas: false } })).toMatch(/^format\.columns: /);
  });
});
