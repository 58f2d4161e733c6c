/**
 * A quote that cannot be parsed: wrong encoding, wrong format selector, a size field that
 * disagrees with the data, or bytes missing. `field` names the offending field and `offset`
 * is its byte offset in the decoded quote (null when the problem is the input encoding).
 */
export class QuoteParseError extends Error {
  readonly code = "quote_parse_error";
  readonly field: string;
  readonly offset: number | null;
  constructor(field: string, offset: number | null, message: string) {
    super(offset === null ? `${field}: ${message}` : `${field} at offset ${offset}: ${message}`);
    this.name = "QuoteParseError";
    this.field = field;
    this.offset = offset;
  }
}
