// Package structured constrains generation to a formal language: a grammar, a regular
// expression or a list of choices, turned into per-step token masks over a model's
// tokenizer.
//
// # Design
//
// Every front end produces a Grammar: rules over byte-level expressions (byte sets,
// sequences, alternatives, repetitions, rule references). Compile lowers it for an Earley
// parser whose terminals are regular lexemes matched by DFAs (the llguidance design: a
// lexer of regular expressions under a context-free parser):
//
//   - a rule that is not recursive and whose expansion is small (Limits.LexemeSize) becomes
//     one terminal, shared by every reference to it; adjacent literal parts of a parser
//     rule are fused into one terminal; a grammar that is regular as a whole is one DFA;
//   - the parser keeps, per item, the state of the DFA of its next terminal, and a lexeme
//     may end wherever its DFA accepts (no longest-match rule: the language is exactly the
//     grammar's).
//
// A Matcher feeds bytes; it is the reference that token masks are tested against.
//
// # GBNF
//
// ParseGBNF reads llama.cpp's GBNF dialect (see its doc comment).
package structured
