// Package structured constrains generation to a formal language: a context-free grammar
// (GBNF or a Lark-like EBNF), a regular expression or a list of choices, turned into
// per-step token masks over a model's tokenizer, with jump-forward of forced bytes.
//
// # Design
//
// Every front end produces a Grammar: rules over byte-level expressions (byte sets,
// sequences, alternatives, bounded and unbounded repetitions, rule references); character
// classes over code points are lowered to UTF-8 byte sequences when parsed. Compile lowers
// a Grammar for an Earley parser whose terminals are regular lexemes matched by DFAs (the
// llguidance design: a lexer of regular expressions under a context-free parser):
//
//   - a rule that is not recursive and whose expansion is small (Limits.LexemeSize) becomes
//     one terminal, shared by every reference to it; adjacent literal parts of a parser
//     rule are fused into one terminal; a grammar that is regular as a whole is one DFA;
//   - the parser keeps, per Earley item, the state of the DFA of its next terminal, and a
//     lexeme may end wherever its DFA accepts (no longest-match rule: the language is
//     exactly the grammar's, however its lexemes are cut);
//   - groups and repetitions that involve recursive rules become helper rules (left
//     recursion for '*' and '+', which Earley parses in linear time).
//
// A Matcher feeds bytes one at a time: it is the reference that token masks are tested
// against. A TokenGrammar binds a compiled grammar to a TokenTrie (the vocabulary as a
// depth-first byte trie, built once per tokenizer) and caches, per (terminal, DFA state),
// the tokens that stay inside the lexeme and the trie nodes where the lexeme can end; a
// Masker (a sample.Masker: Accept, Rollback, Clone, Mask) ORs those sets and walks the
// parser only below the nodes where a lexeme ends inside a token. Masks allow a token
// exactly when its bytes extend the output to a prefix of the language; end-of-generation
// tokens exactly when the output is complete (only they, when the grammar admits nothing
// more); special (control) tokens never. Where the vocabulary cannot spell any
// continuation the mask offers only end-of-generation tokens and Accept refuses them with
// an error naming the incomplete output.
//
// Forced (on a Matcher or Masker) returns the bytes the grammar forces next — while
// exactly one byte may follow and the output is not complete. Masker.JumpForward turns them
// into the tokens the engine appends without sampling (a sample.Forcer), tokenized
// canonically at both boundaries (see jumpforward.go).
//
// # Bounded whitespace
//
// There is no special whitespace form: bounded repetition is cheap. `ws ::= [ \t\n]{0,N}`
// is a regular rule, so it becomes (part of) a terminal whose DFA has N+1 states, costing
// the parser nothing and the mask one cached token set per state; a front end that writes
// its optional whitespace that way (as the JSON Schema compiler does) cannot produce output
// that loops on spaces or newlines. Unbounded `[ \t\n]*` is allowed too, and then the
// grammar (not the engine) permits unbounded whitespace.
//
// # Limits and caching
//
// Compile takes Limits: wall time, rules after expansion, NFA and DFA states per terminal
// and in all; the parsers also refuse {m,n} counts above 10000 and groups nested more than
// 1000 deep. A non-recursive rule becomes one terminal when its expansion has at most
// Limits.LexemeSize (2000) byte leaves; a larger one stays a parser rule. A counted
// repetition of a body of at most 256 leaves counts its body once and 4 a copy (its
// automaton grows with the count, not the leaves), so a JSON string of maxLength up to
// about 480 is one terminal. Errors say what and where: GBNF and EBNF errors carry line:column, regex errors
// a byte offset, compile errors the rule. Cache keeps compiled TokenGrammars keyed by
// (front end, SHA-256 of the source, tokenizer identity), at most N of them, least
// recently used evicted; concurrent requests for one key share one compile.
//
// # Supported and not
//
// GBNF (ParseGBNF): rules, alternation, grouping, literals, classes with ranges, negation
// and escapes, '.', ?, *, +, {m}, {m,}, {m,n}, {,n}, comments, multi-line rules, `root` as
// start. Not supported: llama.cpp's token references (<[id]>, <name>), so a grammar
// cannot name special tokens.
//
// Regex (ParseRegex): see its doc; the whole output must match. Refused: backreferences,
// lookaround, word boundaries, inner anchors, inline flags, \p classes, possessive
// quantifiers. '.' excludes "\n"; \s is [\t\n\v\f\r ] (ASCII only, as are \d and \w).
//
// Choice: a list of strings. EBNF (ParseEBNF): see its doc; no templates, no imports but
// Lark's common terminals, no case-insensitive literals or regex flags, and no Lark lexer
// semantics (priorities, contextual lexing): the language is the plain grammar's.
//
// A terminal's automaton is built right to left (direct.go): each part followed by the
// automaton of what comes after it, embedding the minimal automata of rule bodies (the JSON
// string character, fragment.go) built once per compile; only the states where the
// expression may go on in two ways on one byte are merged, by a subset construction over
// those states alone. Where a direct build cannot be made, the subset construction over a
// Thompson NFA runs, embedding the same fragments and the bodies of repetitions, so its
// subsets stay small. Both are minimized, so the automaton is the same either way.
// Automata are built in about linear time: the subset construction hashes its subsets and
// looks up each distinct move of a state once, and minimization is Moore's refinement done
// incrementally (refine: a round revisits only the predecessors of states that changed
// block), so a counted repetition costs its states, not its states times its count. A large
// counted repetition (a JSON string of maxLength above about 120) is a terminal of its own,
// fused only with a small part after it (the closing quote), and so shared by every key
// that repeats the same body as often; a group of alternatives followed by a small part
// takes that part into each alternative, so that a long string counted out in blocks of
// 100 ends its last block only at the quote.
//
// A lexeme state's entry is computed by one walk of the trie on its first use and cached;
// states alike on every input as long as the longest token share one entry
// (withinEquivalence), so the counting states of a long repetition more than a token's
// length from its end cost one walk in all. Walks skip what they can decide without
// stepping: a subtree whose bytes a DFA state loops on stays in that state; and a subtree
// under a reference language (JSON string characters; the same in ASCII; letters and
// digits: reference.go) is decided by the state's simulation depth h, the most bytes of
// the reference it survives without accepting: where the subtree's part inside the
// reference is at most h deep (or every longer input dies, as in a counted ASCII string
// near its maxLength), and its paths leave the reference only on bytes the state dies on,
// the subtree allows exactly its tokens inside the reference. The trie keeps those tokens
// as one mask per reference and depth (about 6 MiB for Llama 3), so a walk ORs a mask and
// steps only the nodes outside such subtrees.
//
// Known slow spots: a counting state whose string mixes ASCII and longer UTF-8 characters
// near its maxLength, and patterns outside the reference languages under a counted
// repetition, still step most nodes on their first walk (0.3-1.5 ms on the Llama 3
// vocabulary); compiles of schemas with hundreds of fused terminals (renovate: 772) take
// 60-110 ms of CPU, most of it minimizing each terminal's automaton and lowering.
package structured
