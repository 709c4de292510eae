/**
 * What a row's field names may be. A row is an object copied by assignment
 * on its way (schemas, spreads of computed fields), where a field named
 * `__proto__` sets the copy's prototype instead of a field: it would vanish
 * from the stored row without a word. Such a name is refused where rows come
 * in (rows in hand, a CSV header, an NDJSON line).
 */

/** The field name no row can keep. */
export const UNKEEPABLE_FIELD = "__proto__";

/** Why a row cannot be stored as given: it has a field named `__proto__`. */
export const UNKEEPABLE_FIELD_MESSAGE = `a field may not be named "${UNKEEPABLE_FIELD}" (a JavaScript object takes it as its prototype, not a field, and it would be lost); rename it`;

/** Whether `row` (a parsed JSON object: `JSON.parse` makes `__proto__` an own key) has a field no row can keep. */
export function hasUnkeepableField(row: object): boolean {
  return Object.hasOwn(row, UNKEEPABLE_FIELD);
}

/**
 * Why `header` cannot name a CSV file's columns (no name at all, a name given twice, or `__proto__`), or null when it
 * can. A column of no name (pandas' index, R's row names, a comma ending the header line) is no field: its cells are
 * left out of each row ({@link isUnnamedColumn}).
 */
export function headerProblem(header: readonly string[]): string | null {
  if (header.every(isUnnamedColumn)) return "the header names no column; name the columns a play reads";
  const seen = new Set<string>();
  for (const [i, column] of header.entries()) {
    if (isUnnamedColumn(column)) continue;
    if (column === UNKEEPABLE_FIELD)
      return `the header names a column "${UNKEEPABLE_FIELD}" (column ${i + 1}): ${UNKEEPABLE_FIELD_MESSAGE}`;
    // A column named twice would make each row keep only its last cell.
    if (seen.has(column))
      return `the header names column ${JSON.stringify(column)} twice (again as column ${i + 1}); give each column one name`;
    seen.add(column);
  }
  return null;
}

/** Whether a CSV header's column has no name: it is no field of the rows (pandas' index, R's row names, a trailing comma). */
export function isUnnamedColumn(column: string): boolean {
  return column === "";
}
