/** The `troupe` command as a user runs it: a child process against a real local server, judged by its output and exit code. */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { createServer, request, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TroupeClient } from "../src/client/index.ts";
import { runInput } from "../src/cli/run-input.ts";
import { localServer, until } from "./helpers.ts";

const PORT = 8813;
const BIN = join(import.meta.dirname, "..", "bin", "troupe.mjs");
let server: Awaited<ReturnType<typeof localServer>>;
let client: TroupeClient;
const dir = mkdtempSync(join(tmpdir(), "troupe-cli-"));
const csvFile = join(dir, "leads.csv");

beforeAll(async () => {
  writeFileSync(csvFile, "id,name,domain\n1,Ada Lovelace,example.com\n2,!fail Bob,example.com\n3,Grace Hopper,navy.mil\n");
  server = await localServer(PORT);
  client = new TroupeClient({ baseUrl: server.baseUrl });
});
afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Starts `troupe <args>` with stdin, stdout and stderr as pipes (no terminal), talking to the test's server (or to `url`). */
function start(args: string[], url = server.baseUrl): ChildProcessWithoutNullStreams {
  return spawn(process.execPath, [BIN, ...args], { env: { ...process.env, TROUPE_URL: url, TROUPE_TOKEN: "dev-token" } });
}

type Finished = { code: number | null; stdout: string; stderr: string };

/** The child's exit code and everything it printed. */
function finished(child: ChildProcessWithoutNullStreams): Promise<Finished> {
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

const troupe = (...args: string[]) => finished(start(args));

/**
 * A proxy in front of the test's server that notes the id of every upload made through it, and with `refuseDeletes` answers every DELETE 503 itself (`refuseParts`: every upload part's PUT, with
 * 403 as a proxy's policy would; `failFirstOfEach`: the first PUT of each part and the first complete, 503 as a
 * restart would; `stallParts`: every PUT taken in and answered only once a DELETE comes, 404 as the server would
 * for an upload deleted). `requests` lists every request it saw, as `METHOD path`.
 */
async function uploadRecorder(
  options: { refuseDeletes?: boolean; refuseParts?: boolean; failFirstOfEach?: boolean; stallParts?: boolean } = {},
): Promise<{ url: string; uploadIds: string[]; requests: string[]; close(): Promise<void> }> {
  const uploadIds: string[] = [];
  const requests: string[] = [];
  const stalled: ServerResponse[] = [];
  const target = new URL(server.baseUrl);
  const proxy: Server = createServer((req, res) => {
    const seen = `${req.method} ${req.url}`;
    const again = requests.includes(seen);
    requests.push(seen);
    // Taken in, not answered: the CLI is mid-part until the upload's delete arrives.
    if (options.stallParts && req.method === "PUT") {
      req.resume();
      return void stalled.push(res);
    }
    if (req.method === "DELETE")
      for (const part of stalled.splice(0)) {
        part.writeHead(404, { "Content-Type": "application/json" });
        part.end(JSON.stringify({ error: { code: "upload_not_found", message: "the upload is being deleted" } }));
      }
    const retryable = req.method === "PUT" || (req.method === "POST" && req.url?.endsWith("/complete"));
    const status =
      options.refuseDeletes && req.method === "DELETE"
        ? 503
        : options.refuseParts && req.method === "PUT"
          ? 403
          : options.failFirstOfEach && retryable && !again
            ? 503
            : null;
    if (status !== null) {
      req.resume();
      req.on("end", () => {
        res.writeHead(status, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ error: { code: "unavailable", message: `the test's proxy refuses ${req.method}s` } }));
      });
      return;
    }
    // Without accept-encoding the server answers uncompressed, so the proxy can read the upload's id.
    const { "accept-encoding": _encodings, ...headers } = req.headers;
    const upstream = request(
      { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: { ...headers, host: target.host } },
      (answer) => {
        const chunks: Buffer[] = [];
        answer.on("data", (chunk: Buffer) => chunks.push(chunk));
        answer.on("end", () => {
          const body = Buffer.concat(chunks);
          if (req.method === "POST" && req.url?.startsWith("/v1/uploads") && answer.statusCode === 201) {
            uploadIds.push(JSON.parse(body.toString("utf8")).uploadId);
          }
          const { "transfer-encoding": _chunked, "content-length": _length, ...headers } = answer.headers;
          res.writeHead(answer.statusCode ?? 502, headers);
          res.end(body);
        });
      },
    );
    upstream.on("error", (error) => res.destroy(error));
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
    uploadIds,
    requests,
    close: () => new Promise<void>((resolve) => proxy.close(() => resolve())),
  };
}

/** The status `GET /v1/uploads/<id>` answers: 200 while the server holds the upload, 404 once it is gone. */
async function uploadStatus(uploadId: string): Promise<number> {
  const answer = await fetch(`${server.baseUrl}/v1/uploads/${uploadId}`, { headers: { Authorization: "Bearer dev-token" } });
  await answer.body?.cancel();
  return answer.status;
}

/** The run id of the first line a watching `troupe run` prints (plain output: `<runId> <status>`). */
function firstRunId(child: ChildProcessWithoutNullStreams): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = "";
    child.stdout.on("data", (d: Buffer) => {
      seen += d.toString();
      const match = /^(run_[0-9a-f]{32}) /m.exec(seen);
      if (match) resolve(match[1]!);
    });
    child.on("close", () => reject(new Error(`troupe exited before printing a run id: ${seen}`)));
  });
}

const untilStatus = (runId: string, status: string) =>
  until(
    () => client.get(runId),
    (r) => r.status === status,
    { what: `run ${runId} ${status}` },
  );

describe("troupe", () => {
  let enrichRunId = "";

  it("run --csv/--ndjson --json: waits for the run and prints it as one JSON object; exit 0 when it completed", async () => {
    const { code, stdout, stderr } = await troupe("run", "demo-enrich", "--csv", csvFile, "--json");
    expect(stderr).toBe("");
    expect(code).toBe(0);
    const run = JSON.parse(stdout);
    expect(run).toMatchObject({ runId: expect.stringMatching(/^run_/), status: "completed", result: { rows: 2, failed: 1 } });
    enrichRunId = run.runId;

    const ndjsonFile = join(dir, "leads.ndjson");
    writeFileSync(
      ndjsonFile,
      '{"id":"n1","name":"Ada Lovelace","domain":"example.com"}\n\n{"id":"n2","name":"!fail Bob","domain":"example.com"}\n',
    );
    const ndjson = await troupe("run", "demo-enrich", "--ndjson", ndjsonFile, "--json");
    expect(ndjson.code).toBe(0);
    expect(JSON.parse(ndjson.stdout)).toMatchObject({ status: "completed", result: { rows: 1, failed: 1 } });
  });

  it("run without a terminal prints plain progress lines, then how the run ended", async () => {
    const { code, stdout } = await troupe("run", "demo-enrich", "--csv", csvFile);
    expect(code).toBe(0);
    const lines = stdout.trim().split("\n");
    const runId = lines[0]!.split(" ")[0]!;
    expect(runId).toMatch(/^run_[0-9a-f]{32}$/);
    expect(lines.every((l) => l.startsWith(`${runId} `))).toBe(true);
    expect(lines.filter((l) => l.startsWith(`${runId} leads: 3/3 done, 1 failed`))).toHaveLength(1);
    expect(lines.at(-1)).toMatch(new RegExp(`^${runId} completed \\(leads 2 completed, 1 failed.*\\): \\{"rows":2,"failed":1\\}$`));
  });

  it("a run that fails exits 1 and says why", async () => {
    const { code, stdout } = await troupe("run", "demo-approval", "--input", '{"message":"too late","timeoutMs":50}', "--json");
    expect(code).toBe(1);
    expect(JSON.parse(stdout)).toMatchObject({ status: "failed", error: { code: "event_timeout" } });

    const plain = await troupe("run", "demo-approval", "--input", '{"message":"too late","timeoutMs":50}');
    expect(plain.code).toBe(1);
    expect(plain.stdout.trim().split("\n").at(-1)).toMatch(/ failed.*: event_timeout: /);
  });

  it("usage errors exit 2 with one line on stderr, and start nothing", async () => {
    const before = (await client.list({ limit: 200 })).runs.length;
    const cases = [
      ["run", "demo-enrich"],
      ["run", "demo-enrich", "--csv", csvFile, "--input", "{}"],
      ["run", "demo-enrich", "--csv", join(dir, "missing.csv")],
      ["run", "demo-enrich", "--input", "{not json"],
      ["run", "demo-enrich", "--input", '{"rows":[{"id":"1"}]}'],
      // A key twice: parsed here, the server would get one of its values dropped.
      ["run", "demo-enrich", "--input", '{"rows":[{"id":"1","name":"A","name":"B","domain":"a.test"}]}'],
      ["run", "no-such-play", "--input", "{}"],
      ["run", "demo-enrich", "--csv", csvFile, "--max-spend", "lots"],
      ["runs", "--limit", "0"],
      ["no-such-command"],
      ["export", "run_0123456789abcdef0123456789abcdef", "leads", "--format", "ndjson", "--safe"],
      // Not a regular file: read as it is sent, it failed mid-request as "unreachable" (exit 1).
      ["run", "demo-enrich", "--csv", dir],
    ];
    const results = await Promise.all(cases.map((args) => troupe(...args)));
    results.forEach(({ code, stdout, stderr }, i) => {
      expect({ args: cases[i], code, stdout, lines: stderr.trim().split("\n").length }).toEqual({
        args: cases[i],
        code: 2,
        stdout: "",
        lines: 1,
      });
    });
    expect(results[2]!.stderr).toBe(`troupe: cannot read ${join(dir, "missing.csv")}: no such file\n`);
    expect(results[4]!.stderr).toMatch(/^troupe: invalid_request: /);
    expect(results.at(-1)!.stderr).toBe(`troupe: cannot read ${dir}: not a regular file (a directory or a pipe); give a file\n`);
    expect((await client.list({ limit: 200 })).runs.length).toBe(before);
  });

  it("exit 3 when the watched run is cancelled by `troupe cancel` from another process", async () => {
    const watching = start(["run", "demo-approval", "--input", '{"message":"cancel me"}']);
    const result = finished(watching);
    const runId = await firstRunId(watching);
    await untilStatus(runId, "waiting");
    const cancel = await troupe("cancel", runId);
    expect(cancel.code).toBe(0);
    expect(cancel.stdout).toMatch(new RegExp(`^${runId} (cancelling|cancelled)\\n$`));
    const { code, stdout } = await result;
    expect(code).toBe(3);
    expect(stdout.trim().split("\n").at(-1)).toMatch(new RegExp(`^${runId} cancelled\\b`));
  });

  it("SIGINT without a terminal detaches: exit 130, and the run goes on", async () => {
    const watching = start(["run", "demo-approval", "--input", '{"message":"detach from me"}']);
    const result = finished(watching);
    const runId = await firstRunId(watching);
    await untilStatus(runId, "waiting");
    watching.kill("SIGINT");
    const { code, stderr } = await result;
    expect(code).toBe(130);
    expect(stderr).toContain(`detached from ${runId}`);
    expect((await client.get(runId)).status).toBe("waiting");
    await client.cancel(runId);
  });

  it("signal, watch and status: a detached demo-approval run approved from the command line", async () => {
    const detached = await troupe("run", "demo-approval", "--input", '{"message":"approve me"}', "--detach", "--json");
    expect(detached.code).toBe(0);
    const { runId, status } = JSON.parse(detached.stdout);
    expect(status).toEqual(expect.any(String));
    await untilStatus(runId, "waiting");

    const signal = await troupe("signal", runId, "approve", "--data", '{"by":"cli"}', "--json");
    expect(signal.code).toBe(0);
    expect(JSON.parse(signal.stdout)).toMatchObject({ consumed: true, duplicate: false });

    const watched = await troupe("watch", runId, "--json");
    expect(watched.code).toBe(0);
    expect(JSON.parse(watched.stdout)).toMatchObject({ runId, status: "completed", result: { approved: { by: "cli" } } });

    const shown = await troupe("status", runId);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain(`${runId}  demo-approval  completed`);
    expect(shown.stdout).toContain('result: {"approved":{"by":"cli"}}');

    const late = await troupe("signal", runId, "approve");
    expect(late.code).toBe(1);
    expect(late.stderr).toMatch(/^troupe: run_finished: /);
  });

  it("runs lists the org's runs, newest first, a page at a time", async () => {
    const { code, stdout } = await troupe("runs", "--json");
    expect(code).toBe(0);
    const { runs } = JSON.parse(stdout);
    expect(runs.map((r: { runId: string }) => r.runId)).toContain(enrichRunId);

    const page = await troupe("runs", "--limit", "1");
    expect(page.code).toBe(0);
    const [line, more] = page.stdout.trim().split("\n");
    expect(line).toMatch(/^run_[0-9a-f]{32} {2}/);
    expect(more).toMatch(/^more: troupe runs --limit 1 --cursor \S+$/);
    // Following the hint: the next page, of the same size.
    const next = await troupe(...more!.slice("more: troupe ".length).split(" "));
    expect(next.code).toBe(0);
    const [nextLine] = next.stdout.trim().split("\n");
    expect(nextLine).toMatch(/^run_[0-9a-f]{32} {2}/);
    expect(nextLine!.slice(0, 36)).not.toBe(line!.slice(0, 36));
    expect(
      next.stdout
        .trim()
        .split("\n")
        .filter((l) => l.startsWith("run_")),
    ).toHaveLength(1);
  });

  it("uploads lists the org's uploads, ready or receiving, a page at a time; delete-upload deletes one", async () => {
    const ready = await client.upload("id,name\n1,Ada\n2,Grace\n", { format: "csv" });
    const { uploadId: receiving } = await client.startMultipartUpload({ format: "ndjson" });
    // Every page, following each page's `more:` line to the end (the other tests' runs uploaded files too).
    const lines: string[] = [];
    for (let args = ["uploads", "--limit", "100"]; ; ) {
      const page = await troupe(...args);
      expect(page.code).toBe(0);
      const printed = page.stdout.trimEnd().split("\n");
      const more = printed.at(-1)!.startsWith("more: ") ? printed.pop()! : null;
      lines.push(...printed);
      if (!more) break;
      args = more.slice("more: troupe ".length).split(" ");
    }
    const { createdAt } = await client.getUpload(receiving);
    expect(lines).toContainEqual(
      expect.stringMatching(new RegExp(`^${ready.uploadId} {2}ready {6}csv {5}2 rows {2}22 bytes *${ready.createdAt}$`)),
    );
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^${receiving} {2}receiving {2}ndjson {2} *${createdAt}$`)));

    const first = await troupe("uploads", "--limit", "1");
    const [line, more] = first.stdout.trim().split("\n");
    expect(line).toMatch(/^up_[0-9a-f]{32} {2}/);
    expect(more).toMatch(/^more: troupe uploads --limit 1 --cursor up_[0-9a-f]{32}$/);
    const next = await troupe(...more!.slice("more: troupe ".length).split(" "));
    expect(next.stdout.trim().split("\n")[0]!.slice(0, 35)).not.toBe(line!.slice(0, 35));

    expect(await troupe("delete-upload", ready.uploadId)).toEqual({ code: 0, stdout: `${ready.uploadId} deleted\n`, stderr: "" });
    const deleted = await troupe("delete-upload", receiving, "--json");
    expect({ code: deleted.code, answer: JSON.parse(deleted.stdout) }).toEqual({ code: 0, answer: { uploadId: receiving, deleted: true } });
    const listed = JSON.parse((await troupe("uploads", "--json", "--limit", "100")).stdout);
    expect(listed.uploads.map((u: { uploadId: string }) => u.uploadId)).not.toContain(ready.uploadId);
    expect(listed.uploads.map((u: { uploadId: string }) => u.uploadId)).not.toContain(receiving);

    // Deleted already: no such upload, exit 1. A page past the API's largest: a usage error, exit 2.
    const again = await troupe("delete-upload", ready.uploadId);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^troupe: upload_not_found: /);
    expect((await troupe("uploads", "--limit", "101")).code).toBe(2);
  });

  it("export writes the run's rows as CSV (to a file) or NDJSON (to stdout)", async () => {
    const out = join(dir, "leads-export.csv");
    const csv = await troupe("export", enrichRunId, "leads", "--out", out);
    expect(csv.code).toBe(0);
    const lines = readFileSync(out, "utf8").trim().split("\n");
    expect(lines[0]).toBe("id,name,domain,email,verdict,_key,_status,_error");
    expect(lines).toHaveLength(4);
    expect(lines[1]).toMatch(/^1,Ada Lovelace,example\.com,ada\.lovelace@example\.com,(valid|invalid),1,completed,$/);

    const ndjson = await troupe("export", enrichRunId, "leads", "--format", "ndjson");
    expect(ndjson.code).toBe(0);
    const rows = ndjson.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(rows.map((r) => [r._key, r._status])).toEqual([
      ["1", "completed"],
      ["2", "failed"],
      ["3", "completed"],
    ]);

    const missing = await troupe("export", enrichRunId, "no-such-dataset");
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^troupe: dataset_not_found: /);
    // An export that fails leaves the file it would have written as it was.
    const kept = await troupe("export", enrichRunId, "no-such-dataset", "--out", out);
    expect(kept.code).toBe(1);
    expect(readFileSync(out, "utf8").trim().split("\n")).toEqual(lines);
    expect(readdirSync(dir).filter((name) => name.includes(".part-"))).toEqual([]);
  });

  it("rerun starts the run again and watches it", async () => {
    const { code, stdout } = await troupe("rerun", enrichRunId, "--json");
    expect(code).toBe(0);
    const run = JSON.parse(stdout);
    expect(run.runId).not.toBe(enrichRunId);
    expect(run).toMatchObject({ status: "completed", result: { rows: 2, failed: 1 } });
  });

  it("estimate, and a run the server refuses, delete the file they uploaded; a run that starts keeps it", async () => {
    const ndjsonFile = join(dir, "estimate.ndjson");
    writeFileSync(ndjsonFile, '{"id":"e1","name":"Ada Lovelace","domain":"example.com"}\n');
    const proxy = await uploadRecorder();
    try {
      const cases = [
        { args: ["estimate", "demo-enrich", "--csv", csvFile, "--json"], code: 0 },
        { args: ["estimate", "demo-enrich", "--ndjson", ndjsonFile], code: 0 },
        { args: ["estimate", "no-such-play", "--csv", csvFile], code: 2 },
        { args: ["run", "no-such-play", "--csv", csvFile], code: 2 },
        { args: ["run", "no-such-play", "--ndjson", ndjsonFile, "--json"], code: 2 },
      ];
      for (const { args, code } of cases) {
        const result = await finished(start(args, proxy.url));
        expect({ args, code: result.code, warned: /warning/.test(result.stderr) }).toEqual({ args, code, warned: false });
      }
      expect(proxy.uploadIds).toHaveLength(cases.length);
      for (const uploadId of proxy.uploadIds) expect({ uploadId, status: await uploadStatus(uploadId) }).toEqual({ uploadId, status: 404 });

      // The run reads its upload: it stays.
      const run = await finished(start(["run", "demo-enrich", "--csv", csvFile, "--detach", "--json"], proxy.url));
      expect(run.code).toBe(0);
      await untilStatus(JSON.parse(run.stdout).runId, "completed");
      expect(await uploadStatus(proxy.uploadIds.at(-1)!)).toBe(200);
    } finally {
      await proxy.close();
    }
  });

  it("an upload the estimate cannot delete is a warning on stderr: its answer and exit code stand", async () => {
    const proxy = await uploadRecorder({ refuseDeletes: true });
    try {
      const direct = await troupe("estimate", "demo-enrich", "--csv", csvFile, "--json");
      const refused = await finished(start(["estimate", "demo-enrich", "--csv", csvFile, "--json"], proxy.url));
      expect(refused.code).toBe(direct.code);
      expect(refused.stdout).toBe(direct.stdout);
      const [uploadId] = proxy.uploadIds;
      expect(refused.stderr).toBe(
        `troupe: warning: could not delete upload ${uploadId} (unavailable: the test's proxy refuses DELETEs); it stays on the server: DELETE /v1/uploads/${uploadId}\n`,
      );
      expect(await uploadStatus(uploadId!)).toBe(200);
      await client.deleteUpload(uploadId!);
    } finally {
      await proxy.close();
    }
  });

  it("run --csv with --idempotency-key again: the same run, and the file uploaded again deleted", async () => {
    const key = `cli-csv-${Date.now()}`;
    const proxy = await uploadRecorder();
    try {
      const args = ["run", "demo-enrich", "--csv", csvFile, "--idempotency-key", key, "--detach", "--json"];
      const first = await finished(start(args, proxy.url));
      expect(first.code).toBe(0);
      const again = await finished(start(args, proxy.url));
      expect({ code: again.code, stderr: again.stderr }).toEqual({ code: 0, stderr: "" });
      expect(JSON.parse(again.stdout)).toMatchObject({ runId: JSON.parse(first.stdout).runId, unusedUpload: proxy.uploadIds[1] });
      expect(proxy.uploadIds).toHaveLength(2);
      expect(await uploadStatus(proxy.uploadIds[0]!)).toBe(200);
      expect(await uploadStatus(proxy.uploadIds[1]!)).toBe(404);
      await untilStatus(JSON.parse(first.stdout).runId, "completed");
    } finally {
      await proxy.close();
    }
  });

  it("a file sent in parts whose part fails is deleted from the server, not left there for good", async () => {
    const big = join(dir, "big.csv");
    writeFileSync(big, "id,name,domain\n");
    // Past one request's 95 MB: sent in parts (the first is refused, so only it travels).
    truncateSync(big, 96_000_000);
    const proxy = await uploadRecorder({ refuseParts: true });
    try {
      const { code, stderr } = await finished(start(["run", "demo-enrich", "--csv", big], proxy.url));
      expect(code).toBe(1);
      expect(stderr).toMatch(/unavailable: the test's proxy refuses PUTs/);
      expect(proxy.uploadIds).toHaveLength(1);
      expect(await uploadStatus(proxy.uploadIds[0]!)).toBe(404);
    } finally {
      await proxy.close();
      rmSync(big, { force: true });
    }
  });

  it("sends a part or a complete the server could not answer (a restart) again: the upload is whole, and kept", async () => {
    // Parts of 5 MiB (R2's least) over a file of 60,000 rows, sent in parts past 6 MB.
    const rows = Array.from({ length: 60_000 }, (_, i) => `${i},Name ${i} ${"x".repeat(150)},d${i}.example.com\n`).join("");
    const file = join(dir, "parts.csv");
    writeFileSync(file, `id,name,domain\n${rows}`);
    const proxy = await uploadRecorder({ failFirstOfEach: true });
    try {
      const limits = { maxRequestBytes: 6_000_000, partBytes: 5 * 1024 * 1024, retryDelaysMs: [10] };
      const { uploadId } = await runInput({ csv: file }, new TroupeClient({ baseUrl: proxy.url }), limits);
      expect(await client.getUpload(uploadId!)).toMatchObject({ status: "ready", rows: 60_000, bytes: Buffer.byteLength(rows) + 15 });
      const sent = proxy.requests.filter((r) => r.startsWith("PUT") || r.endsWith("/complete"));
      // Each part and the complete twice: refused once, then taken.
      const parts = Math.ceil((Buffer.byteLength(rows) + 15) / limits.partBytes);
      expect(parts).toBeGreaterThan(1);
      const expected = [
        ...Array.from({ length: parts }, (_, i) => `PUT /v1/uploads/<id>/parts/${i + 1}`),
        "POST /v1/uploads/<id>/complete",
      ];
      expect(sent.map((r) => r.replace(/up_[0-9a-f]+/, "<id>"))).toEqual(expected.flatMap((r) => [r, r]));
    } finally {
      await proxy.close();
      rmSync(file, { force: true });
    }
  });

  it("export --out interrupted mid-download exits 130 and leaves neither the file nor a part of it", async () => {
    // A server that sends the export's first line and then nothing more: the CLI is mid-download when interrupted.
    const stalled: Server = createServer((req, res) => {
      res.writeHead(200, { "Content-Type": "text/csv" });
      res.write("id,name,_key,_status,_error\n");
    });
    await new Promise<void>((resolve) => stalled.listen(0, "127.0.0.1", resolve));
    const out = join(dir, "interrupted.csv");
    try {
      const child = start(
        ["export", "run_0123456789abcdef0123456789abcdef", "leads", "--out", out],
        `http://127.0.0.1:${(stalled.address() as AddressInfo).port}`,
      );
      const ended = finished(child);
      const partial = `${out}.part-${child.pid}`;
      await until(
        async () => (readdirSync(dir).includes(`interrupted.csv.part-${child.pid}`) ? readFileSync(partial, "utf8") : ""),
        (text) => text.length > 0,
        { what: "the first line to be written" },
      );
      child.kill("SIGINT");
      expect((await ended).code).toBe(130);
      expect(readdirSync(dir).filter((f) => f.startsWith("interrupted.csv"))).toEqual([]);
    } finally {
      stalled.closeAllConnections();
      await new Promise<void>((resolve) => stalled.close(() => resolve()));
    }
  });

  it("a file sent in parts interrupted mid-part (Ctrl-C) is deleted from the server before the CLI exits 130", async () => {
    const big = join(dir, "big-interrupted.csv");
    writeFileSync(big, "id,name,domain\n");
    truncateSync(big, 96_000_000);
    const proxy = await uploadRecorder({ stallParts: true });
    try {
      const child = start(["run", "demo-enrich", "--csv", big], proxy.url);
      const ended = finished(child);
      await until(
        async () => proxy.requests,
        (seen) => seen.some((r) => r.startsWith("PUT")),
        { what: "the first part to be on its way" },
      );
      child.kill("SIGINT");
      const { code, stderr } = await ended;
      expect(code).toBe(130);
      // Deleted once: the part refused as the upload went is not taken for a failure (a second delete, a warning).
      expect(proxy.requests.filter((r) => r.startsWith("DELETE"))).toHaveLength(1);
      expect(stderr).not.toContain("warning");
      expect(proxy.uploadIds).toHaveLength(1);
      expect(await uploadStatus(proxy.uploadIds[0]!)).toBe(404);
    } finally {
      await proxy.close();
      rmSync(big, { force: true });
    }
  });

  it("never prints a token it could not send, and calls that a usage error", async () => {
    const child = spawn(process.execPath, [BIN, "runs"], {
      env: { ...process.env, TROUPE_URL: server.baseUrl, TROUPE_TOKEN: "s3cr3t-token-4f9a\nsecond-line" },
    });
    const { code, stderr } = await finished(child);
    expect(stderr).toMatch(/^troupe: invalid_request: could not send GET \/v1\/runs/);
    expect(stderr).not.toContain("s3cr3t-token-4f9a");
    expect(stderr).not.toContain("second-line");
    expect(code).toBe(2);
  });

  it("estimate answers what the run would bill, or says clearly that the server cannot estimate", async () => {
    const probe = await fetch(`${server.baseUrl}/v1/runs/estimate`, {
      method: "POST",
      headers: { Authorization: "Bearer dev-token", "Content-Type": "application/json" },
      body: JSON.stringify({ play: "demo-enrich", input: { csv: readFileSync(csvFile, "utf8") } }),
    });
    const { code, stdout, stderr } = await troupe("estimate", "demo-enrich", "--csv", csvFile, "--json");
    if (probe.status === 404) {
      // The spend work (POST /v1/runs/estimate) is not in this server.
      expect(code).toBe(1);
      expect(stderr).toMatch(/^troupe: this server cannot estimate yet: POST \/v1\/runs\/estimate answered 404/);
    } else {
      expect(code).toBe(0);
      expect(JSON.parse(stdout)).toEqual(await probe.json());
    }
  });
});
