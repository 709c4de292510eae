/** Runs: start (idempotently), rerun, read, list, cancel, events (API.md "Runs", "Events"). */
import { Hono } from "hono";
import { z } from "zod";
import { RerunRequest, StartRun } from "../api/contract";
import { TestPolicyOverrides } from "../core/policy";
import { playRegistry } from "../plays";
import type { PlayDefinition } from "../play/types";
import { isTerminal } from "../core/statuses";
import { parseRunCursor } from "../stores/directory-store";
import { type DailyBudget, pastDailyLimit } from "../stores/org-spend-store";
import { canonicalJson, sha256Hex } from "../core/hash";
import { messageOf, NotFoundError, TroupeError, ValidationError } from "../core/errors";
import type { AppEnv } from "./context";
import { validate } from "./errors";
import { parseJsonBody, readJsonBody } from "./json-body";
import { runLinks } from "../runtime/views/links";
import { isUploadedRows } from "../play/define";
import { uploadNotFound } from "../uploads/errors";
import { Uploads } from "../uploads/uploads";
import { MAX_RUN_TIMEOUT_SECONDS } from "../actors/RunCoordinator";

/** The public run request (src/api/contract.ts) plus the test runner's knobs. */
export const StartRunBody = StartRun.extend({
  /** Test runner only (a 400 elsewhere): lease, heartbeat and retry knobs for this run. */
  testPolicy: TestPolicyOverrides.optional(),
});
export type StartRunBody = z.infer<typeof StartRunBody>;

/** Limits and test knobs of a submitted run (absent on reruns). */
type RunLimits = { timeoutSeconds?: number; testPolicy?: TestPolicyOverrides; maxSpend?: number; retryUnknown?: boolean };

// Strict: a filter it does not have (`parentRunId`) is refused rather than ignored (every run would come back).
const ListQuery = z
  .object({
    limit: z.coerce.number().int().min(1).max(200).default(50),
    cursor: z.string().max(500).optional(),
  })
  .strict();

const EventsQuery = z.object({
  after: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
});

const RUN_ID = /^run_[0-9a-f]{32}$/;

/** Printable ASCII, no leading or trailing space, at most 200 characters. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e](?:[\x20-\x7e]{0,198}[\x21-\x7e])?$/;

/** The request's `Idempotency-Key`, validated; null without one. */
export function idempotencyKeyOf(request: Request): string | null {
  const key = request.headers.get("Idempotency-Key");
  if (key === null) return null;
  if (!IDEMPOTENCY_KEY.test(key)) {
    throw new ValidationError("the Idempotency-Key header must be 1 to 200 printable ASCII characters", [
      { path: "Idempotency-Key", message: "1 to 200 printable ASCII characters" },
    ]);
  }
  return key;
}

export function playByName(env: Env, name: string): PlayDefinition {
  const play = playRegistry(env).get(name);
  if (!play) throw new NotFoundError("unknown_play", `no play named ${JSON.stringify(name)}; GET /v1/plays lists them`);
  return play;
}

/**
 * A run's input for `play`, validated by the play's schema (a 400 naming the
 * field). An input that is an upload must be a ready upload of this org: a
 * 404 otherwise, or a 409 while its parts are still arriving.
 */
export async function playInput(env: Env, org: string, play: PlayDefinition, raw: unknown, what: string): Promise<unknown> {
  return (await checkedInput(env, org, play, raw, what)).input;
}

/**
 * The play's input, checked, and the content of the upload it reads (its format and SHA-256; null for rows in hand,
 * or an upload stored before its hash was kept): a keyed submit fingerprints the file, not one upload of it.
 */
async function checkedInput(
  env: Env,
  org: string,
  play: PlayDefinition,
  raw: unknown,
  what: string,
): Promise<{ input: unknown; uploadContent: string | null }> {
  const input = validate(play.input, raw, what, ["input"]);
  const uploadId = uploadOf(input);
  if (uploadId === null) return { input, uploadContent: null };
  const upload = await new Uploads({ bucket: env.UPLOADS, org }).describe(uploadId);
  if (!upload) throw uploadNotFound(uploadId);
  if (upload.status !== "ready") {
    throw new TroupeError(
      "upload_not_ready",
      `upload ${uploadId} is still receiving its bytes: wait for its request to end, or complete it if it was sent in parts (POST /v1/uploads/${uploadId}/complete)`,
      {
        httpStatus: 409,
      },
    );
  }
  return { input, uploadContent: upload.sha256 ? `${upload.format}:${upload.sha256}` : null };
}

/** A run to start, as the routes pass it to {@link submitRun}. */
type Submit = {
  org: string;
  play: string;
  input: unknown;
  force: boolean;
  forceToolRefresh: boolean;
  idempotencyKey: string | null;
  rerunOf?: string;
  /** The format and SHA-256 of the upload the input reads (see {@link checkedInput}). */
  uploadContent?: string | null;
} & RunLimits;

/**
 * What a keyed submit asks for, hashed: a retry with the same key must ask
 * for the same. Absent limits add nothing: a request without any fingerprints
 * as its play, input and flags alone, as keys already stored hold it.
 */
function fingerprintOf(request: Submit): Promise<string> {
  const { play, force, forceToolRefresh, timeoutSeconds, testPolicy, maxSpend, retryUnknown } = request;
  // The upload's content, not its id: the same file uploaded again is the same request.
  const input = request.uploadContent ? { ...(request.input as object), rows: { uploadContent: request.uploadContent } } : request.input;
  const spend =
    maxSpend === undefined && retryUnknown === undefined ? [] : [{ maxSpend: maxSpend ?? null, retryUnknown: retryUnknown ?? false }];
  const limits =
    timeoutSeconds === undefined && testPolicy === undefined && spend.length === 0
      ? []
      : [{ timeoutSeconds: timeoutSeconds ?? null, testPolicy: testPolicy ?? null }, ...spend];
  const rerun = request.rerunOf === undefined ? [] : [{ rerunOf: request.rerunOf }];
  return sha256Hex(canonicalJson([play, input, force, forceToolRefresh, ...limits, ...rerun]));
}

/**
 * The request with each limit that spells out its default left out, so that
 * it fingerprints as the request that leaves it out (which is unchanged).
 * `force` and `forceToolRefresh` have their defaults filled in by the schema
 * already; `maxSpend` and `testPolicy` have none (absent is no cap, the
 * standard policy). A rerun's `timeoutSeconds` is always given (its source's
 * when the rerun names none), so only a submit's has a default.
 */
function withoutDefaults(request: Submit): Submit {
  return {
    ...request,
    retryUnknown: request.retryUnknown === false ? undefined : request.retryUnknown,
    timeoutSeconds:
      request.rerunOf === undefined && request.timeoutSeconds === MAX_RUN_TIMEOUT_SECONDS ? undefined : request.timeoutSeconds,
  };
}

/**
 * Starts a run, once per `Idempotency-Key` of the org: the org's directory
 * records key → run id atomically, and the run is started under whichever id
 * it holds. Starting is idempotent, so a submit that died between the two
 * steps is completed by the next submit with the same key. A retry whose run
 * exists gets it back, whatever the org's daily limit says now; only a run to
 * start is refused past it. `rerunOf` keeps a rerun's key apart from the
 * submit that used it first (the same play and input).
 */
async function submitRun(env: Env, request: Submit): Promise<{ runId: string; status: string; unusedUpload?: string }> {
  const { org, play, input, force, forceToolRefresh, idempotencyKey, timeoutSeconds, testPolicy, maxSpend, retryUnknown } = request;
  let runId = `run_${crypto.randomUUID().replaceAll("-", "")}`;
  if (idempotencyKey !== null) {
    const fingerprint = await fingerprintOf(withoutDefaults(request));
    // A key claimed by a server that did not leave defaults out (within IDEMPOTENCY_KEY_TTL_MS) holds the request's
    // fingerprint as sent, and one claimed before uploads were hashed holds the upload's id: a retry sent the same
    // way still matches it.
    const earlier = new Set([fingerprint, await fingerprintOf(request)]);
    if (request.uploadContent)
      for (const r of [withoutDefaults(request), request]) earlier.add(await fingerprintOf({ ...r, uploadContent: null }));
    const claimed = await env.ORG_DIRECTORY.getByName(org).claimIdempotencyKey({
      key: idempotencyKey,
      fingerprint,
      runId,
      now: Date.now(),
    });
    // The org is past its daily limit and the key is new: refused, and the key stays free for a submit that starts.
    if ("overDailyLimit" in claimed) throw dailyLimitReached(claimed.overDailyLimit);
    if (!earlier.has(claimed.fingerprint)) {
      throw new TroupeError(
        "idempotency_key_reused",
        `this Idempotency-Key was already used for a different request (run ${claimed.runId}); send a new key for a new request`,
        { httpStatus: 409 },
      );
    }
    if (claimed.runId !== runId) {
      // A retry: its run, if the first submit got as far as starting it.
      const coordinator = env.RUN_COORDINATOR.getByName(claimed.runId);
      const started = await coordinator.getRun(org);
      if (started) return { runId: claimed.runId, status: started.status, ...(await unusedUpload(coordinator, request)) };
      runId = claimed.runId;
    }
    // A key this submit recorded was claimed under the limit; a retry whose run never started is checked again.
    if (!claimed.created) await refuseOverDailyLimit(env, org);
  } else {
    await refuseOverDailyLimit(env, org);
  }
  const coordinator = env.RUN_COORDINATOR.getByName(runId);
  const run = await coordinator
    .start({
      runId,
      org,
      play,
      input,
      force,
      forceToolRefresh,
      parentRunId: null,
      timeoutSeconds,
      testPolicy,
      maxSpend,
      retryUnknown,
    })
    .catch(async (error: unknown) => {
      if (!RPC_TOO_LARGE.test(messageOf(error))) throw error;
      // The 413 stands whatever the release does: a key it could not free stays claimed, as before the release was made.
      if (idempotencyKey !== null) await releaseKey(env, { org, key: idempotencyKey, runId, coordinator }).catch(() => {});
      throw inputTooLarge();
    });
  return { runId, status: run.status };
}

/**
 * Frees the key of a submit whose input was too large to hand to its run: nothing was sent, so the key stands for a
 * run that never started, and a retry with smaller rows and the same key starts its own. The key is kept if another
 * submit of the same key and fingerprint did start that run meanwhile (its rows differ from these only where a
 * fingerprint cannot tell, `-0` for `0`, and fit); one that starts it between the look and the release leaves the key
 * free, and a later retry starts a second run of the same rows (which reuses every receipt: nothing is billed twice).
 */
async function releaseKey(
  env: Env,
  { org, key, runId, coordinator }: { org: string; key: string; runId: string; coordinator: ReturnType<typeof coordinatorOf> },
): Promise<void> {
  if (await coordinator.getRun(org)) return;
  await env.ORG_DIRECTORY.getByName(org).releaseIdempotencyKey({ key, runId });
}

/** How the runtime refuses an RPC whose arguments are past 32 MiB as it serializes them: nothing was sent. */
const RPC_TOO_LARGE = /Serialized RPC arguments or return values are limited to /;

/**
 * An input within the request's limits whose parsed value is still too large
 * to hand to its run: a value takes more bytes than its JSON (a number such
 * as `-0` or `0.5` takes 9), so 11 MB of JSON can be past the RPC's 32 MiB.
 */
function inputTooLarge(): TroupeError {
  return new TroupeError(
    "request_too_large",
    "the run's input is too large once parsed to hand to its run (numbers take up to 9 bytes each); put its rows in an upload (POST /v1/uploads)",
    { httpStatus: 413 },
  );
}

/**
 * The upload of a keyed retry that its run does not read: the same file uploaded again answered the run an earlier
 * upload of it started. The client may delete it (`troupe run` does); a retry with the run's own upload is told nothing.
 */
async function unusedUpload(coordinator: ReturnType<typeof coordinatorOf>, request: Submit): Promise<{ unusedUpload?: string }> {
  const sent = uploadOf(request.input);
  if (!request.uploadContent || sent === null) return {};
  const source = await coordinator.source(request.org);
  if (!source || uploadOf(JSON.parse(source.inputJson)) === sent) return {};
  return { unusedUpload: sent };
}

function uploadOf(input: unknown): string | null {
  const rows = typeof input === "object" && input !== null ? (input as { rows?: unknown }).rows : undefined;
  return isUploadedRows(rows) ? rows.upload : null;
}

/** An org past its daily spend limit starts no run (API.md "Spend"): the refusal says how much and until when. */
async function refuseOverDailyLimit(env: Env, org: string): Promise<void> {
  const budget = await env.ORG_DIRECTORY.getByName(org).spendBudget(Date.now());
  if (pastDailyLimit(budget)) throw dailyLimitReached(budget);
}

function dailyLimitReached({ dailyCredits, spentToday }: DailyBudget): TroupeError {
  return new TroupeError(
    "daily_spend_limit_reached",
    `this org has billed ${spentToday} credits today (UTC), its daily limit is ${dailyCredits}; runs start again tomorrow, or raise the limit with PUT /v1/spend/limits`,
    { httpStatus: 409, details: { spentToday, dailyCredits } },
  );
}

function submitted(runId: string, status: string, play: PlayDefinition) {
  return { runId, status, links: runLinks(runId, play.datasets ?? []) };
}

/** The coordinator of a run id, or a 404 for ids this API never gave out. */
export function coordinatorOf(env: Env, runId: string) {
  if (!RUN_ID.test(runId)) throw runNotFound(runId);
  return env.RUN_COORDINATOR.getByName(runId);
}

export function runNotFound(runId: string): NotFoundError {
  return new NotFoundError("run_not_found", `no run ${JSON.stringify(runId)} in this org`);
}

export const runRoutes = new Hono<AppEnv>();

runRoutes.post("/runs", async (c) => {
  const idempotencyKey = idempotencyKeyOf(c.req.raw);
  const body = validate(StartRunBody, await readJsonBody(c.req.raw), "the run request");
  if (body.testPolicy && c.env.TROUPE_TEST_MODE !== "on") {
    throw new ValidationError("testPolicy is accepted only by the test runner", [{ path: "testPolicy", message: "not accepted here" }]);
  }
  const play = playByName(c.env, body.play);
  const { input, uploadContent } = await checkedInput(c.env, c.get("org"), play, body.input, `input for play ${body.play}`);
  const { runId, status, unusedUpload } = await submitRun(c.env, {
    org: c.get("org"),
    play: play.name,
    input,
    uploadContent,
    force: body.force,
    forceToolRefresh: body.forceToolRefresh,
    idempotencyKey,
    timeoutSeconds: body.timeoutSeconds,
    testPolicy: body.testPolicy,
    maxSpend: body.maxSpend,
    retryUnknown: body.retryUnknown,
  });
  return c.json({ ...submitted(runId, status, play), ...(unusedUpload ? { unusedUpload } : {}) }, 202);
});

runRoutes.post("/runs/:runId/rerun", async (c) => {
  const sourceId = c.req.param("runId");
  const idempotencyKey = idempotencyKeyOf(c.req.raw);
  const text = await c.req.text();
  const body = validate(RerunRequest, text.trim() === "" ? {} : parseJsonBody(text), "the rerun request");
  const source = await coordinatorOf(c.env, sourceId).source(c.get("org"));
  if (!source) throw runNotFound(sourceId);
  if (!isTerminal(source.status)) {
    // Its rows are leased to it: a rerun now would only wait for them. Refuse, and say what to do.
    throw new TroupeError("run_active", `run ${sourceId} is ${source.status}; wait until it ends, or cancel it, then rerun`, {
      httpStatus: 409,
      details: { runId: sourceId, status: source.status },
    });
  }
  const play = playByName(c.env, source.play);
  // The stored input passed this play's schema once; parse it again in case the play changed since.
  const input = await playInput(
    c.env,
    c.get("org"),
    play,
    JSON.parse(source.inputJson),
    `the input of run ${sourceId} for play ${play.name} as deployed now`,
  );
  const { runId, status } = await submitRun(c.env, {
    org: c.get("org"),
    play: play.name,
    input,
    force: body.force,
    forceToolRefresh: body.forceToolRefresh,
    idempotencyKey,
    rerunOf: sourceId,
    maxSpend: body.maxSpend,
    retryUnknown: body.retryUnknown,
    timeoutSeconds: body.timeoutSeconds ?? source.timeoutSeconds,
  });
  return c.json({ ...submitted(runId, status, play), rerunOf: sourceId }, 202);
});

runRoutes.get("/runs", async (c) => {
  const query = validate(ListQuery, c.req.query(), "the query");
  if (query.cursor !== undefined && parseRunCursor(query.cursor) === undefined) {
    throw new ValidationError("cursor is not one this API gave out", [{ path: "cursor", message: "unknown cursor" }]);
  }
  const page = await c.env.ORG_DIRECTORY.getByName(c.get("org")).list({ limit: query.limit, cursor: query.cursor ?? null });
  return c.json({
    runs: page.runs.map((r) => ({
      runId: r.runId,
      play: r.play,
      status: r.status,
      parentRunId: r.parentRunId,
      createdAt: new Date(r.createdAt).toISOString(),
      updatedAt: new Date(r.updatedAt).toISOString(),
    })),
    nextCursor: page.nextCursor,
  });
});

runRoutes.get("/runs/:runId", async (c) => {
  const runId = c.req.param("runId");
  const run = await coordinatorOf(c.env, runId).getRun(c.get("org"));
  if (!run) throw runNotFound(runId);
  return Response.json(run);
});

runRoutes.post("/runs/:runId/cancel", async (c) => {
  const runId = c.req.param("runId");
  const run = await coordinatorOf(c.env, runId).cancel(c.get("org"));
  if (!run) throw runNotFound(runId);
  return c.json({ runId, status: run.status }, 202);
});

runRoutes.get("/runs/:runId/events", async (c) => {
  const runId = c.req.param("runId");
  const query = validate(EventsQuery, c.req.query(), "the query");
  const page = await coordinatorOf(c.env, runId).events(c.get("org"), query.after, query.limit);
  if (!page) throw runNotFound(runId);
  return c.json(page);
});
