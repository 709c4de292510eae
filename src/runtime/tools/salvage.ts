/** Writing a run's salvage back into its receipts (the store keeps the entries; this makes the calls). */
import type { ReceiptClient } from "../../clients/shards";
import { type AttemptRef, outputChars, RPC_PAGE_CHARS } from "../../contracts/shards";
import { messageOf } from "../../core/errors";
import type { SalvageStore } from "../../stores/salvage-store";
import { getOrInsert, inSizedPages } from "../../core/collections";

/** Receipts written back per call, and at most RPC_PAGE_CHARS of their outputs (a call carries 32 MiB). */
const RESTORE_BATCH = 500;

/**
 * Writes pending entries into their receipts, as the attempt that claimed
 * them (fenced: a receipt another attempt took over is left to it).
 * @returns what is still pending, and the first failure if any.
 */
export async function restoreSalvage(salvage: SalvageStore, receipts: ReceiptClient): Promise<{ pending: number; failure: string | null }> {
  const groups = new Map<string, { shard: number; attempt: AttemptRef; items: { key: string; output: unknown }[] }>();
  for (const entry of salvage.pendingEntries()) {
    const shard = receipts.shardOf(entry.receiptKey);
    const id = `${shard}\n${entry.attempt.attemptId}`;
    getOrInsert(groups, id, () => ({ shard, attempt: entry.attempt, items: [] })).items.push({
      key: entry.receiptKey,
      output: entry.output,
    });
  }
  let failure: string | null = null;
  for (const group of groups.values()) {
    const pages = inSizedPages(group.items, RPC_PAGE_CHARS, (item) => outputChars(item.output), RESTORE_BATCH);
    for (const items of pages) {
      try {
        const result = await receipts.complete(group.shard, { attempt: group.attempt, items });
        salvage.recordRestore({ restored: result.accepted, superseded: result.rejected });
      } catch (error) {
        failure ??= messageOf(error);
      }
    }
  }
  salvage.countRestoreTry();
  return { pending: salvage.pendingCount(), failure };
}
