/**
 * Merging keyset reads of a dataset's shards into one sequence in input order.
 * Rows route to shards by key, so the next rows of a run's input are spread
 * over every shard; each shard answers its own next rows, in index order, and
 * the merge gives out only what no shard can still precede.
 */

/** What one shard has answered of a keyset read: rows in index order, and whether it holds more after them. */
export interface ShardBuffer<R extends { index: number }> {
  rows: R[];
  more: boolean;
}

/**
 * Takes out of the buffers, in index order, every row up to the frontier: the
 * lowest last index among the shards that hold more (all rows when none does).
 * No shard can hold an unread row below the frontier, so what this returns
 * continues the sequence without a gap; rows past it stay in their buffers.
 * It is never empty while a row is buffered or a shard holds more.
 *
 * A shard that holds more must have rows buffered: read it again once its
 * buffer is empty, before the next call.
 *
 * @example
 * const buffers = [{ rows: [r0, r3], more: true }, { rows: [r1, r2, r5], more: false }];
 * takeInOrder(buffers); // [r0, r1, r2, r3]; r5 waits for shard 0's next rows
 */
export function takeInOrder<R extends { index: number }>(buffers: ShardBuffer<R>[]): R[] {
  let frontier = Number.POSITIVE_INFINITY;
  for (const buffer of buffers) {
    if (!buffer.more) continue;
    const last = buffer.rows.at(-1);
    if (last === undefined) throw new Error("takeInOrder: a shard that holds more rows has none buffered; read it first");
    frontier = Math.min(frontier, last.index);
  }
  const taken: R[] = [];
  for (const buffer of buffers) {
    let count = 0;
    while (count < buffer.rows.length && buffer.rows[count]!.index <= frontier) count++;
    if (count > 0) taken.push(...buffer.rows.splice(0, count));
  }
  return taken.sort((a, b) => a.index - b.index);
}
