//! Splits map text into positioned tokens: words, braces and brackets; `#` comments dropped.

use crate::error::CrushError;

/// One token with its 1-based position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub text: String,
    pub line: usize,
    pub column: usize,
}

/// Tokenizes the whole text.
pub(crate) fn tokenize(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    for (line_index, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        let mut current = String::new();
        let mut start = 0;
        for (col, ch) in line.char_indices() {
            let is_punct = matches!(ch, '{' | '}' | '[' | ']');
            if ch.is_whitespace() || is_punct {
                if !current.is_empty() {
                    tokens.push(Token {
                        text: std::mem::take(&mut current),
                        line: line_index + 1,
                        column: start + 1,
                    });
                }
                if is_punct {
                    tokens.push(Token {
                        text: ch.to_string(),
                        line: line_index + 1,
                        column: col + 1,
                    });
                }
            } else {
                if current.is_empty() {
                    start = col;
                }
                current.push(ch);
            }
        }
        if !current.is_empty() {
            tokens.push(Token {
                text: current,
                line: line_index + 1,
                column: start + 1,
            });
        }
    }
    tokens
}

/// A cursor over tokens that produces positioned errors.
pub(crate) struct Cursor {
    tokens: Vec<Token>,
    pos: usize,
    end_line: usize,
}

impl Cursor {
    pub fn new(text: &str) -> Self {
        Cursor {
            tokens: tokenize(text),
            pos: 0,
            end_line: text.lines().count().max(1),
        }
    }

    pub fn peek(&self) -> Option<&str> {
        self.tokens.get(self.pos).map(|t| t.text.as_str())
    }

    pub fn at_end(&self) -> bool {
        self.pos >= self.tokens.len()
    }

    /// Error at the current token (or at the end of input).
    pub fn error(&self, message: impl Into<String>) -> CrushError {
        let (line, column) = match self.tokens.get(self.pos) {
            Some(t) => (t.line, t.column),
            None => (self.end_line, 1),
        };
        CrushError::Parse {
            line,
            column,
            message: message.into(),
        }
    }

    /// Error at the previous token.
    pub fn error_prev(&self, message: impl Into<String>) -> CrushError {
        let t = self.pos.checked_sub(1).and_then(|p| self.tokens.get(p));
        match t {
            Some(t) => CrushError::Parse {
                line: t.line,
                column: t.column,
                message: message.into(),
            },
            None => self.error(message),
        }
    }

    pub fn next(&mut self, what: &str) -> Result<String, CrushError> {
        match self.tokens.get(self.pos) {
            Some(t) => {
                self.pos += 1;
                Ok(t.text.clone())
            }
            None => Err(self.error(format!("unexpected end of input, expected {what}"))),
        }
    }

    pub fn expect(&mut self, word: &str) -> Result<(), CrushError> {
        if self.peek() == Some(word) {
            self.pos += 1;
            Ok(())
        } else {
            let found = self.peek().unwrap_or("end of input").to_string();
            Err(self.error(format!("expected `{word}`, found `{found}`")))
        }
    }

    pub fn eat(&mut self, word: &str) -> bool {
        if self.peek() == Some(word) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub fn int(&mut self, what: &str) -> Result<i64, CrushError> {
        let tok = self.next(what)?;
        tok.parse::<i64>()
            .map_err(|_| self.error_prev(format!("expected an integer {what}, found `{tok}`")))
    }

    pub fn i32(&mut self, what: &str) -> Result<i32, CrushError> {
        let v = self.int(what)?;
        i32::try_from(v).map_err(|_| self.error_prev(format!("{what} {v} is out of range")))
    }

    pub fn float(&mut self, what: &str) -> Result<f32, CrushError> {
        let tok = self.next(what)?;
        match tok.parse::<f32>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
            _ => Err(self.error_prev(format!(
                "expected a non-negative number {what}, found `{tok}`"
            ))),
        }
    }
}
