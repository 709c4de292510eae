/**
 * Batch calls: cutting a tool's queued members into batch calls, and taking a
 * provider's batch reply apart again, one result per member.
 */
import type { BatchMemberResult } from "../../play/types";

/**
 * Cuts `members` into batches of at most `maxMembers`, in order, as even as
 * possible (120 members at 50 → 40, 40, 40: the same number of calls as
 * 50, 50, 20, with no small straggler).
 */
export function planBatches<T>(members: readonly T[], maxMembers: number): T[][] {
  if (!Number.isInteger(maxMembers) || maxMembers < 1) throw new Error(`maxMembers must be a positive integer, got ${maxMembers}`);
  if (members.length === 0) return [];
  const count = Math.ceil(members.length / maxMembers);
  const base = Math.floor(members.length / count);
  const larger = members.length % count;
  const batches: T[][] = [];
  let start = 0;
  for (let i = 0; i < count; i++) {
    const size = base + (i < larger ? 1 : 0);
    batches.push(members.slice(start, start + size));
    start += size;
  }
  return batches;
}

/**
 * Checks a tool's split of a batch reply: exactly one well-formed result per
 * member, in member order. Anything else throws: the engine cannot tell which
 * output belongs to whom, so no member may take one.
 */
export function checkSplit<Output>(results: unknown, memberCount: number, toolId: string): BatchMemberResult<Output>[] {
  if (!Array.isArray(results)) throw new Error(`${toolId}: batch.split returned ${typeof results}, not an array`);
  if (results.length !== memberCount)
    throw new Error(`${toolId}: batch.split returned ${results.length} results for ${memberCount} members`);
  results.forEach((result, i) => {
    const ok =
      result &&
      typeof result === "object" &&
      ((result as { ok?: unknown }).ok === true ||
        ((result as { ok?: unknown }).ok === false && typeof (result as { error?: { code?: unknown } }).error?.code === "string"));
    if (!ok)
      throw new Error(
        `${toolId}: batch.split result ${i} is neither { ok: true, output } nor { ok: false, error: { code, message, retryable } }`,
      );
  });
  return results as BatchMemberResult<Output>[];
}
