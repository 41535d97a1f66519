//! How the API writes values every resource shares: timestamps as RFC 3339 in UTC.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub fn iso8601(t: OffsetDateTime) -> String {
    t.format(&Rfc3339)
        .expect("UTC timestamps within 0000..9999 format")
}
