//! Parser for the text of statements and expressions (`C[i, k] = C[i, k] + A[i, j] * B[j, k]`).
//!
//! Grammar, loosest binding first:
//! ```text
//! stmt    := IDENT '[' exprs? ']' ('=' | '+=' | '-=' | '*=') expr
//! expr    := or
//! or      := and ('||' and)*
//! and     := cmp ('&&' cmp)*
//! cmp     := add (('<' | '<=' | '>' | '>=' | '==' | '!=') add)?
//! add     := mul (('+' | '-') mul)*
//! mul     := unary (('*' | '/') unary)*
//! unary   := ('-' | '!') unary | primary
//! primary := INT | FLOAT | IDENT | IDENT '[' exprs? ']' | IDENT '(' exprs ')' | '(' expr ')'
//! ```
//! Calls: `min max pow` (2 arguments), `abs exp log sqrt` (1), `select` (3), casts `f32 f64 i8 i32 i64` (1).
//! MLIR's semiring operations (co-iteration kernels): `binary(a, b, OVERLAP, LEFT, RIGHT)`,
//! `unary(a, PRESENT, ABSENT)`, `select(a, PRED)`, `reduce(VALUE, COMBINE, IDENTITY)`; a region
//! is an expression over `x` (and `y`), or `identity`, or `empty`.

use crate::ir::{BinOp, Expr, Region, Semiring, Size, Store, UnOp};
use lacuna_ir::DType;
use std::fmt;

/// A syntax error in a statement, at a byte offset of its text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("column {}: {message}", .offset + 1)]
pub struct ParseError {
    /// Byte offset of the offending token.
    pub offset: usize,
    /// What was expected and what was found.
    pub message: String,
}

impl ParseError {
    /// Renders the error with the statement text and a caret under the offending token.
    pub fn render(&self, text: &str) -> String {
        format!(
            "in statement `{text}`: column {}: {}",
            self.offset + 1,
            self.message
        )
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Int(i64),
    Float(f64),
    Punct(&'static str),
    End,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "`{s}`"),
            Tok::Int(v) => write!(f, "`{v}`"),
            Tok::Float(v) => write!(f, "`{v:?}`"),
            Tok::Punct(p) => write!(f, "`{p}`"),
            Tok::End => f.write_str("end of statement"),
        }
    }
}

const PUNCTS: [&str; 20] = [
    "+=", "-=", "*=", "<=", ">=", "==", "!=", "&&", "||", "+", "-", "*", "/", "<", ">", "=", "!",
    "(", ")", ",",
];

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Ident(text[start..i].to_string()), start));
        } else if c.is_ascii_digit()
            || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            let mut is_float = false;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if i < bytes.len() && bytes[i] == b'.' {
                is_float = true;
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
                let mut j = i + 1;
                if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
                    j += 1;
                }
                if j < bytes.len() && bytes[j].is_ascii_digit() {
                    is_float = true;
                    i = j;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let s = &text[start..i];
            let tok = if is_float {
                Tok::Float(
                    s.parse()
                        .map_err(|_| err(start, format!("bad number `{s}`")))?,
                )
            } else {
                Tok::Int(
                    s.parse()
                        .map_err(|_| err(start, format!("integer `{s}` does not fit in i64")))?,
                )
            };
            out.push((tok, start));
        } else if c == b'[' || c == b']' {
            out.push((Tok::Punct(if c == b'[' { "[" } else { "]" }), start));
            i += 1;
        } else if let Some(p) = PUNCTS.iter().find(|p| text[i..].starts_with(**p)) {
            out.push((Tok::Punct(p), start));
            i += p.len();
        } else {
            let ch = text[i..].chars().next().unwrap_or('?');
            return Err(err(start, format!("unexpected character `{ch}`")));
        }
    }
    if out.len() > MAX_TOKENS {
        return Err(err(
            out[MAX_TOKENS].1,
            format!(
                "an expression of more than {MAX_TOKENS} tokens (split it into several stores): the parser and the passes after it recurse once per nesting level"
            ),
        ));
    }
    out.push((Tok::End, text.len()));
    Ok(out)
}

/// The most tokens one statement or expression may hold. It bounds the depth of its tree, which
/// the parser and the passes after it walk recursively (5,000 levels overflowed the stack).
pub const MAX_TOKENS: usize = 1024;

fn err(offset: usize, message: String) -> ParseError {
    ParseError { offset, message }
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }
    fn offset(&self) -> usize {
        self.toks[self.pos].1
    }
    fn bump(&mut self) -> Tok {
        let t = self.toks[self.pos].0.clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }
    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Tok::Punct(q) if *q == p) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn expect(&mut self, p: &str) -> Result<(), ParseError> {
        if self.eat(p) {
            Ok(())
        } else {
            Err(err(
                self.offset(),
                format!("expected `{p}`, found {}", self.peek()),
            ))
        }
    }
    fn ident(&mut self, what: &str) -> Result<String, ParseError> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                self.bump();
                Ok(s)
            }
            t => Err(err(self.offset(), format!("expected {what}, found {t}"))),
        }
    }
    fn index_list(&mut self) -> Result<Vec<Expr>, ParseError> {
        self.expect("[")?;
        let mut out = Vec::new();
        if self.eat("]") {
            return Ok(out);
        }
        loop {
            out.push(self.expr()?);
            if self.eat("]") {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }
    fn stmt(&mut self) -> Result<Store, ParseError> {
        let buffer = self.ident("a buffer name")?;
        let indices = self.index_list()?;
        let op_at = self.offset();
        let op = match self.bump() {
            Tok::Punct("=") => None,
            Tok::Punct("+=") => Some(BinOp::Add),
            Tok::Punct("-=") => Some(BinOp::Sub),
            Tok::Punct("*=") => Some(BinOp::Mul),
            t => return Err(err(op_at, format!("expected `=` or `+=`, found {t}"))),
        };
        let rhs = self.expr()?;
        if *self.peek() != Tok::End {
            return Err(err(
                self.offset(),
                format!("unexpected {} after the expression", self.peek()),
            ));
        }
        let value = match op {
            None => rhs,
            Some(op) => Expr::Binary(
                op,
                Box::new(Expr::Load {
                    buffer: buffer.clone(),
                    indices: indices.clone(),
                }),
                Box::new(rhs),
            ),
        };
        Ok(Store {
            buffer,
            indices,
            value,
        })
    }
    fn expr(&mut self) -> Result<Expr, ParseError> {
        self.binary_level(0)
    }
    fn binary_level(&mut self, level: usize) -> Result<Expr, ParseError> {
        const LEVELS: [&[(&str, BinOp)]; 5] = [
            &[("||", BinOp::Or)],
            &[("&&", BinOp::And)],
            &[
                ("<=", BinOp::Le),
                (">=", BinOp::Ge),
                ("==", BinOp::Eq),
                ("!=", BinOp::Ne),
                ("<", BinOp::Lt),
                (">", BinOp::Gt),
            ],
            &[("+", BinOp::Add), ("-", BinOp::Sub)],
            &[("*", BinOp::Mul), ("/", BinOp::Div)],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut lhs = self.binary_level(level + 1)?;
        loop {
            let found = LEVELS[level]
                .iter()
                .find(|(p, _)| matches!(self.peek(), Tok::Punct(q) if q == p));
            let Some(&(_, op)) = found else {
                return Ok(lhs);
            };
            self.bump();
            let rhs = self.binary_level(level + 1)?;
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs));
            if level == 2 {
                // Comparisons do not chain.
                return Ok(lhs);
            }
        }
    }
    fn unary(&mut self) -> Result<Expr, ParseError> {
        if self.eat("-") {
            // `-5` directly before a literal is a negative literal; `-(5)` is a negation.
            match *self.peek() {
                Tok::Int(v) if v > 0 => {
                    self.bump();
                    return Ok(Expr::Int(-v));
                }
                Tok::Float(v) if v > 0.0 => {
                    self.bump();
                    return Ok(Expr::Float(-v));
                }
                _ => return Ok(Expr::Unary(UnOp::Neg, Box::new(self.unary()?))),
            }
        }
        if self.eat("!") {
            return Ok(Expr::Unary(UnOp::Not, Box::new(self.unary()?)));
        }
        self.primary()
    }
    fn primary(&mut self) -> Result<Expr, ParseError> {
        let at = self.offset();
        match self.bump() {
            Tok::Int(v) => Ok(Expr::Int(v)),
            Tok::Float(v) => Ok(Expr::Float(v)),
            Tok::Punct("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Ident(name) => {
                if matches!(self.peek(), Tok::Punct("[")) {
                    let indices = self.index_list()?;
                    return Ok(Expr::Load {
                        buffer: name,
                        indices,
                    });
                }
                if self.eat("(") {
                    let mut args = Vec::new();
                    if !self.eat(")") {
                        loop {
                            args.push(self.expr()?);
                            if self.eat(")") {
                                break;
                            }
                            self.expect(",")?;
                        }
                    }
                    return call(&name, args, at);
                }
                Ok(Expr::Var(name))
            }
            t => Err(err(at, format!("expected an expression, found {t}"))),
        }
    }
}

fn region(e: Expr) -> Region {
    match e {
        Expr::Var(v) if v == "identity" => Region::Identity,
        Expr::Var(v) if v == "empty" => Region::Empty,
        other => Region::Expr(other),
    }
}

fn call(name: &str, mut args: Vec<Expr>, at: usize) -> Result<Expr, ParseError> {
    let semiring = match (name, args.len()) {
        ("binary", 5) => {
            let mut it = args.drain(..);
            let (a, b) = (it.next(), it.next());
            let (o, l, r) = (it.next(), it.next(), it.next());
            match (a, b, o, l, r) {
                (Some(a), Some(b), Some(o), Some(l), Some(r)) => Some(Semiring::Binary {
                    a,
                    b,
                    overlap: region(o),
                    left: region(l),
                    right: region(r),
                }),
                _ => None,
            }
        }
        ("unary", 3) => {
            let mut it = args.drain(..);
            match (it.next(), it.next(), it.next()) {
                (Some(a), Some(p), Some(q)) => Some(Semiring::Unary {
                    a,
                    present: region(p),
                    absent: region(q),
                }),
                _ => None,
            }
        }
        ("select", 2) => {
            let mut it = args.drain(..);
            match (it.next(), it.next()) {
                (Some(a), Some(pred)) => Some(Semiring::Select { a, pred }),
                _ => None,
            }
        }
        ("reduce", 3) => {
            let mut it = args.drain(..);
            match (it.next(), it.next(), it.next()) {
                (Some(value), Some(combine), Some(identity)) => Some(Semiring::Reduce {
                    value,
                    combine,
                    identity,
                }),
                _ => None,
            }
        }
        ("binary", n) | ("unary", n) | ("reduce", n) => {
            let want = match name {
                "binary" => 5,
                _ => 3,
            };
            return Err(err(
                at,
                format!("`{name}` takes {want} arguments, found {n}"),
            ));
        }
        _ => None,
    };
    if let Some(s) = semiring {
        return Ok(Expr::Semiring(Box::new(s)));
    }
    let arity = match name {
        "abs" | "exp" | "log" | "sqrt" | "f32" | "f64" | "i8" | "i32" | "i64" => 1,
        "min" | "max" | "pow" => 2,
        "select" => 3,
        _ => return Err(err(at, format!("unknown function `{name}`"))),
    };
    if args.len() != arity {
        return Err(err(
            at,
            format!("`{name}` takes {arity} argument(s), found {}", args.len()),
        ));
    }
    let mut next = || Box::new(args.remove(0));
    Ok(match name {
        "abs" => Expr::Unary(UnOp::Abs, next()),
        "exp" => Expr::Unary(UnOp::Exp, next()),
        "log" => Expr::Unary(UnOp::Log, next()),
        "sqrt" => Expr::Unary(UnOp::Sqrt, next()),
        "min" => Expr::Binary(BinOp::Min, next(), next()),
        "max" => Expr::Binary(BinOp::Max, next(), next()),
        "pow" => Expr::Binary(BinOp::Pow, next(), next()),
        "select" => Expr::Select(next(), next(), next()),
        other => {
            let dtype = DType::from_name(other).unwrap_or(DType::F64);
            Expr::Cast(dtype, next())
        }
    })
}

/// Parses a statement such as `C[i, k] = C[i, k] + A[i, j] * B[j, k]`; `+=`, `-=` and `*=` are
/// sugar for the full form.
pub fn parse_stmt_text(text: &str) -> Result<Store, ParseError> {
    let mut p = Parser {
        toks: lex(text)?,
        pos: 0,
    };
    p.stmt()
}

/// Parses a scalar expression.
pub fn parse_expr(text: &str) -> Result<Expr, ParseError> {
    let mut p = Parser {
        toks: lex(text)?,
        pos: 0,
    };
    let e = p.expr()?;
    if *p.peek() != Tok::End {
        return Err(err(
            p.offset(),
            format!("unexpected {} after the expression", p.peek()),
        ));
    }
    Ok(e)
}

/// Parses a size: a non-negative integer or a parameter name.
pub fn parse_size(text: &str) -> Result<Size, String> {
    let t = text.trim();
    if let Ok(v) = t.parse::<u64>() {
        return Ok(Size::Const(v));
    }
    let ok = t
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(Size::Param(t.to_string()))
    } else {
        Err(format!(
            "`{text}` is not a size: expected a non-negative integer or a parameter name"
        ))
    }
}
