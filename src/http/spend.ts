/** The org's spend: credits billed per day and provider, and its daily limit (API.md "Spend"). */
import { Hono } from "hono";
import { z } from "zod";
import { StartRun } from "../api/contract";
import { estimateRun } from "../runtime/tools/estimate";
import { policyFor } from "../core/policy";
import { SpendLimits, utcDay } from "../stores/org-spend-store";
import { toolRegistry } from "../tools";
import { ValidationError } from "../core/errors";
import type { AppEnv } from "./context";
import { validate } from "./errors";
import { readJsonBody } from "./json-body";
import { playByName, playInput } from "./runs";

const DAY = /^\d{4}-\d{2}-\d{2}$/;
/** A calendar day, `YYYY-MM-DD`, that exists (not 2024-02-30 or 2024-13-01). */
const Day = z
  .string()
  .regex(DAY, "YYYY-MM-DD")
  .refine((day) => {
    const at = Date.parse(day);
    return Number.isFinite(at) && utcDay(at) === day;
  }, "not a day of the calendar");
/** The longest range one `GET /v1/spend` covers. */
const MAX_RANGE_DAYS = 366;

const SpendQuery = z.object({
  from: Day.optional(),
  to: Day.optional(),
});

export const spendRoutes = new Hono<AppEnv>();

/** `GET /v1/spend?from=&to=` (UTC days, inclusive; default the last 30 days) → `{ from, to, total, days: [{ day, total, byProvider }] }`. */
spendRoutes.get("/spend", async (c) => {
  const query = validate(SpendQuery, c.req.query(), "the query");
  const to = query.to ?? utcDay(Date.now());
  const from = query.from ?? utcDay(Date.parse(to) - 29 * 86_400_000);
  const span = (Date.parse(to) - Date.parse(from)) / 86_400_000;
  if (!Number.isFinite(span) || span < 0 || span >= MAX_RANGE_DAYS) {
    throw new ValidationError(`from must be a day on or before to, at most ${MAX_RANGE_DAYS} days apart`, [
      { path: "from", message: "out of range" },
    ]);
  }
  const days = await c.env.ORG_DIRECTORY.getByName(c.get("org")).spendDays(from, to);
  const total = days.reduce((sum, d) => sum + Math.round(d.total * 1e6), 0) / 1e6;
  return c.json({ from, to, total, days });
});

/**
 * `POST /v1/runs/estimate` with the body of a run: what it would bill now
 * (src/runtime/tools/estimate.ts). No run is started and no provider is called.
 */
spendRoutes.post("/runs/estimate", async (c) => {
  const body = validate(StartRun, await readJsonBody(c.req.raw), "the run request");
  const play = playByName(c.env, body.play);
  const org = c.get("org");
  const input = await playInput(c.env, org, play, body.input, `input for play ${body.play}`);
  const history = await c.env.ORG_DIRECTORY.getByName(org).playStats(play.name);
  const estimate = await estimateRun({
    env: c.env,
    org,
    play,
    input,
    force: body.force,
    forceToolRefresh: body.forceToolRefresh,
    retryUnknown: body.retryUnknown === true,
    tools: toolRegistry(c.env),
    policy: policyFor(c.env),
    history,
    now: Date.now,
  });
  return c.json(estimate);
});

/** `GET /v1/spend/limits` → `{ dailyCredits, spentToday }`. */
spendRoutes.get("/spend/limits", async (c) => c.json(await c.env.ORG_DIRECTORY.getByName(c.get("org")).spendBudget(Date.now())));

/** `PUT /v1/spend/limits` with `{ dailyCredits: number | null }`: the org's daily cap (null removes it). */
spendRoutes.put("/spend/limits", async (c) => {
  const limits = validate(SpendLimits, await readJsonBody(c.req.raw), "the spend limits");
  const directory = c.env.ORG_DIRECTORY.getByName(c.get("org"));
  await directory.setSpendLimits(limits);
  return c.json(await directory.spendBudget(Date.now()));
});
