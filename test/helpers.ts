/** Test helpers: talk to the Worker over its real HTTP API. */
import type { ChunkCompletion, EventPage, LedgerEvent, LedgerEventType, NoticeCode } from "../src/api/responses";
import { isTerminal } from "../src/core/statuses";
import { exports } from "cloudflare:workers";

export const TOKEN = "dev-token";

export async function api(path: string, init: RequestInit & { token?: string | null; json?: unknown } = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  const token = init.token === undefined ? TOKEN : init.token;
  if (token) headers.set("Authorization", `Bearer ${token}`);
  let body = init.body;
  if (init.json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(init.json);
  }
  return exports.default.fetch(new Request(`http://troupe.test${path}`, { ...init, headers, body }));
}

export async function apiJson<T = any>(path: string, init: Parameters<typeof api>[1] = {}): Promise<{ status: number; body: T }> {
  const res = await api(path, init);
  return { status: res.status, body: (await res.json()) as T };
}

export async function startRun(
  play: string,
  input: unknown,
  // Any field of POST /v1/runs besides play and input (force, maxSpend, testPolicy, timeoutSeconds, ...), and the token.
  options: { token?: string; [flag: string]: unknown } = {},
): Promise<string> {
  const { token, ...flags } = options;
  const { status, body } = await apiJson("/v1/runs", { method: "POST", json: { play, input, ...flags }, token });
  if (status !== 202) throw new Error(`start failed: ${status} ${JSON.stringify(body)}`);
  return body.runId as string;
}

/**
 * The run as `GET /v1/runs/<id>` shows it. A read that races a crash of the
 * coordinator gets a 5xx (the object was reset under it): like any client,
 * ask again.
 */
export async function runView(runId: string, options: { token?: string } = {}): Promise<any> {
  for (let tries = 1; ; tries++) {
    const { status, body } = await apiJson(`/v1/runs/${runId}`, { token: options.token });
    if (status === 200) return body;
    if (status < 500 || tries >= 20) throw new Error(`GET run: ${status} ${JSON.stringify(body)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Polls the run until it is terminal (the coordinator's alarm drives it meanwhile; reads also wake it). */
export async function waitForRun(runId: string, options: { token?: string; timeoutMs?: number } = {}): Promise<any> {
  const deadline = Date.now() + (options.timeoutMs ?? 45_000);
  for (;;) {
    const run = await runView(runId, options);
    if (isTerminal(run.status)) return run;
    if (Date.now() > deadline) throw new Error(`run ${runId} still ${run.status}: ${JSON.stringify(run.progress)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Every row of a run's dataset, paged through the API. */
export async function datasetRows(runId: string, name: string): Promise<any[]> {
  const rows: any[] = [];
  // By cursor: a page of large rows is cut short by its size, not at its limit.
  for (let query = "limit=1000"; ; ) {
    const { status, body } = await apiJson(`/v1/runs/${runId}/datasets/${name}?${query}`);
    if (status !== 200) throw new Error(`dataset: ${status} ${JSON.stringify(body)}`);
    rows.push(...body.rows);
    if (body.nextCursor === null) return rows;
    query = `cursor=${body.nextCursor}&limit=1000`;
  }
}

/** The run's whole ledger, typed as the API documents it: narrow an event by its `type`. */
export async function allEvents(runId: string): Promise<LedgerEvent[]> {
  const events: LedgerEvent[] = [];
  let after = 0;
  for (;;) {
    const { body } = await apiJson<EventPage>(`/v1/runs/${runId}/events?after=${after}&limit=1000`);
    events.push(...body.events);
    if (body.events.length < 1000) return events;
    after = body.nextCursor;
  }
}

/** The codes of the runtime's notices in the run's log (what it did, whatever the lines' wording), in order. */
export async function notices(runId: string): Promise<NoticeCode[]> {
  return eventsOfType(await allEvents(runId), "log.appended").flatMap((e) => (e.code ? [e.code] : []));
}

/** The events of one type, narrowed to its fields. */
export function eventsOfType<Type extends LedgerEventType>(
  events: readonly LedgerEvent[],
  type: Type,
): Extract<LedgerEvent, { type: Type }>[] {
  return events.filter((e): e is Extract<LedgerEvent, { type: Type }> => e.type === type);
}

/** Each chunk a run's `chunks.completed` events reported, with its map and its event's `seq`, in ledger order. */
export function chunkCompletions(events: readonly LedgerEvent[]): (ChunkCompletion & { map: string; seq: number })[] {
  return eventsOfType(events, "chunks.completed").flatMap((e) => e.chunks.map((c) => ({ ...c, map: e.map, seq: e.seq })));
}

export async function simStats(): Promise<any> {
  return (await apiJson("/v1/sim/stats")).body;
}

export async function simReset(): Promise<void> {
  await api("/v1/sim/reset", { method: "POST" });
}

/** The simulated provider's rules (API.md), computed independently of its code. */
export function expectedEmail(name: string, domain: string): string {
  return `${name.replace(/\s+/g, ".").toLowerCase()}@${domain.toLowerCase()}`;
}

export function expectedVerdict(email: string): "valid" | "invalid" {
  let sum = 0;
  for (let i = 0; i < email.length; i++) sum += email.charCodeAt(i);
  return sum % 3 !== 0 ? "valid" : "invalid";
}
