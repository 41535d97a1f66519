//! HTML overlays of a stream: what one is (a web page and its box in the 1920×1080 overlay
//! space) and the rules a box must follow. Rendering lives in the pipeline; storage in `db`.

use serde::{Deserialize, Serialize};

/// The overlay coordinate space: boxes are given in it and scaled to the source's size.
pub const SPACE_WIDTH: u32 = 1920;
pub const SPACE_HEIGHT: u32 = 1080;
/// Overlays one stream may have: each is a web page rendered for as long as the stream is live.
pub const MAX_PER_STREAM: usize = 10;
/// Longest overlay URL accepted (characters).
pub const MAX_URL: usize = 2048;

/// What a client sets on an overlay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlaySpec {
    pub url: String,
    pub width: u32,
    pub height: u32,
    pub x: u32,
    pub y: u32,
    /// Full frame: the page covers the whole picture; the box is ignored.
    pub stretch: bool,
}

/// A rule an overlay breaks: the field and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: &'static str,
    pub message: String,
}

fn invalid(field: &'static str, message: impl Into<String>) -> Invalid {
    Invalid {
        field,
        message: message.into(),
    }
}

impl OverlaySpec {
    /// The box rules: inside the 1920×1080 space, positive size; the URL is checked by the
    /// caller with the outbound-URL policy.
    pub fn check_box(&self) -> Result<(), Invalid> {
        if self.stretch {
            return Ok(());
        }
        if self.width == 0 || self.width > SPACE_WIDTH {
            return Err(invalid(
                "width",
                format!("`width` must be 1..={SPACE_WIDTH}"),
            ));
        }
        if self.height == 0 || self.height > SPACE_HEIGHT {
            return Err(invalid(
                "height",
                format!("`height` must be 1..={SPACE_HEIGHT}"),
            ));
        }
        if self.x >= SPACE_WIDTH {
            return Err(invalid("x", format!("`x` must be 0..{SPACE_WIDTH}")));
        }
        if self.y >= SPACE_HEIGHT {
            return Err(invalid("y", format!("`y` must be 0..{SPACE_HEIGHT}")));
        }
        if self.x + self.width > SPACE_WIDTH {
            return Err(invalid(
                "width",
                format!(
                    "the box leaves the {SPACE_WIDTH}-pixel-wide space: x + width > {SPACE_WIDTH}"
                ),
            ));
        }
        if self.y + self.height > SPACE_HEIGHT {
            return Err(invalid(
                "height",
                format!("the box leaves the {SPACE_HEIGHT}-pixel-high space: y + height > {SPACE_HEIGHT}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(x: u32, y: u32, width: u32, height: u32) -> OverlaySpec {
        OverlaySpec {
            url: "https://example.com/".into(),
            width,
            height,
            x,
            y,
            stretch: false,
        }
    }

    #[test]
    fn a_box_stays_inside_the_space() {
        assert_eq!(spec(0, 0, 1920, 1080).check_box(), Ok(()));
        assert_eq!(spec(1919, 1079, 1, 1).check_box(), Ok(()));
        let field = |s: OverlaySpec| s.check_box().unwrap_err().field;
        assert_eq!(field(spec(0, 0, 0, 10)), "width");
        assert_eq!(field(spec(0, 0, 1921, 10)), "width");
        assert_eq!(field(spec(0, 0, 10, 0)), "height");
        assert_eq!(field(spec(0, 0, 10, 1081)), "height");
        assert_eq!(field(spec(1920, 0, 10, 10)), "x");
        assert_eq!(field(spec(0, 1080, 10, 10)), "y");
        assert_eq!(field(spec(1900, 0, 100, 10)), "width");
        assert_eq!(field(spec(0, 1000, 10, 100)), "height");
        let full = OverlaySpec {
            stretch: true,
            ..spec(0, 0, 0, 0)
        };
        assert_eq!(full.check_box(), Ok(()));
    }
}
