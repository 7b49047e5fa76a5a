package tokenizer

import (
	"container/heap"
	"fmt"
	"strings"
	"unicode/utf8"
)

// bpeModel is the byte-level BPE encoder (GGUF tokenizer model "gpt2"): the text is split into
// words by the vocabulary's pre-tokenizer, each word's bytes start as one symbol apiece, and
// the adjacent pair with the lowest merge rank is merged until no pair has a rank. It is
// immutable once built and safe for concurrent use.
//
// Symbols are token ids. A merge whose result, or a byte whose character, is missing from the
// vocabulary gets a synthetic id past the vocabulary (with its raw bytes in extra), so that
// merging follows the merge list exactly; such a symbol left at the end is emitted byte by
// byte, as llama.cpp does.
//
// A raw vocabulary (Gemma 4) holds plain UTF-8 token texts instead of GPT-2's byte alphabet:
// each word's characters start as one symbol apiece, a character nothing knows is the symbol
// -(offset+1) (never merged), and bytes left over become <0xNN> tokens.
type bpeModel struct {
	pretok       preTokenizer
	ignoreMerges bool // a word that is itself a token is emitted whole (Llama 3 and others)
	// raw: tokens are plain UTF-8 text, not GPT-2's byte alphabet; words start as one
	// symbol per character and bytes no token covers fall back to <0xNN> tokens.
	raw          bool
	escapeSpaces bool // raw: spaces are written "▁" before splitting (Gemma 4)
	newlineWords bool // a word of line feeds that is a token is emitted whole (Gemma 4)

	nvocab  int32
	byteSym [256]int32          // the symbol of each single byte (byte-level vocabs)
	merges  map[uint64]bpeMerge // by pairKey(left, right)
	rawIDs  map[string]int32    // raw bytes -> token id, for ignoreMerges
	extra   []string            // raw bytes of synthetic symbols, id nvocab+i
	synth   map[string]int32    // raw bytes -> synthetic symbol
	byteTok [256]int32          // the token that stands for a lone byte, -1 when none
}

// bpeMerge is one entry of the merge table: its rank and the symbol it produces.
type bpeMerge struct {
	rank   int32
	result int32
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// bpeHeapThreshold is the word length (in symbols) from which merging uses a heap instead of
// rescanning the pairs; both give the same result.
const bpeHeapThreshold = 48

// newBPE builds the BPE encoder for v with the pre-tokenizer named pre (v.Pre, unless the
// tokenizer model implies one), or v.PreSteps when given.
func newBPE(v *Vocab, pre string) (*bpeModel, error) {
	spec, err := preTokenizerFor(pre)
	if len(v.PreSteps) > 0 {
		spec.split, err = buildPreSteps(v.PreSteps)
	}
	if err != nil {
		return nil, fmt.Errorf("bpe: %w", err)
	}
	spec.ignoreMerges = spec.ignoreMerges || v.IgnoreMerges
	if v.Model == "whitespace" { // llama.cpp's whitespace tokenizer drops the whitespace first
		spec.split = sequence(dropSpaces, spec.split)
	}
	m := &bpeModel{
		pretok:       spec.split,
		ignoreMerges: spec.ignoreMerges,
		raw:          spec.raw,
		escapeSpaces: spec.escapeSpaces,
		newlineWords: spec.newlineWords,
		nvocab:       int32(len(v.Tokens)),
		merges:       make(map[uint64]bpeMerge, len(v.Merges)),
		rawIDs:       make(map[string]int32, len(v.Tokens)),
		synth:        map[string]int32{},
	}
	decode := func(tok string) string { return string(byteLevelDecode(tok)) }
	if m.raw {
		decode = func(tok string) string { return tok }
	}
	// Ordinary tokens first, so that an added token spelled with characters outside the
	// byte-level alphabet cannot shadow the ordinary token with the same bytes.
	for pass := 0; pass < 2; pass++ {
		for id, tok := range v.Tokens {
			t := v.TypeOf(id)
			added := t == TypeControl || t == TypeUserDefined || t == TypeUnused
			if added != (pass == 1) {
				continue
			}
			raw := decode(tok)
			if _, ok := m.rawIDs[raw]; !ok {
				m.rawIDs[raw] = int32(id)
			}
		}
	}
	symbol := func(raw string) int32 {
		if id, ok := m.rawIDs[raw]; ok {
			return id
		}
		if id, ok := m.synth[raw]; ok {
			return id
		}
		id := m.nvocab + int32(len(m.extra))
		m.extra = append(m.extra, raw)
		m.synth[raw] = id
		return id
	}
	for b := range m.byteSym {
		m.byteTok[b] = -1
		if m.raw {
			if id, ok := m.rawIDs[fmt.Sprintf("<0x%02X>", b)]; ok {
				m.byteTok[b] = id
			}
			continue
		}
		m.byteSym[b] = symbol(string([]byte{byte(b)}))
		if m.byteSym[b] < m.nvocab {
			m.byteTok[b] = m.byteSym[b]
		}
	}
	for rank, line := range v.Merges {
		left, right, ok := splitMerge(line)
		if !ok {
			return nil, fmt.Errorf("bpe: merge %d %q is not two tokens separated by a space", rank, line)
		}
		l, r := decode(left), decode(right)
		key := pairKey(symbol(l), symbol(r))
		if _, dup := m.merges[key]; dup {
			continue // the first (lowest) rank wins
		}
		m.merges[key] = bpeMerge{rank: int32(rank), result: symbol(l + r)}
	}
	return m, nil
}

// splitMerge splits a merge "a b" at its first space after the first byte (so a token that
// is itself a space may come first).
func splitMerge(line string) (left, right string, ok bool) {
	if len(line) < 3 {
		return "", "", false
	}
	i := strings.IndexByte(line[1:], ' ')
	if i < 0 {
		return "", "", false
	}
	i++
	if i+1 >= len(line) {
		return "", "", false
	}
	return line[:i], line[i+1:], true
}

// encode appends the ids of fragment, which holds no special tokens, to out; with limit > 0
// it merges no more pre-tokens once out holds more than limit ids.
func (m *bpeModel) encode(fragment string, out []int, limit int) []int {
	out, _ = m.encodeUntil(fragment, out, limit, nil)
	return out
}

// stopEvery is how many pre-tokens encodeUntil encodes between two looks at stop.
const stopEvery = 256

// encodeUntil is encode that gives up (reporting true) once stop, asked every stopEvery
// pre-tokens when not nil, says so.
func (m *bpeModel) encodeUntil(fragment string, out []int, limit int, stop func() bool) ([]int, bool) {
	if fragment == "" {
		return out, false
	}
	if m.escapeSpaces {
		fragment = strings.ReplaceAll(fragment, " ", spaceMarker)
	}
	syms := make([]int32, 0, bpeHeapThreshold)
	n, stopped := 0, false
	m.pretok(fragment, func(w string) {
		if stopped || limit > 0 && len(out) > limit {
			return
		}
		if n++; stop != nil && n%stopEvery == 0 && stop() {
			stopped = true
			return
		}
		out = m.encodeWord(w, out, syms)
	})
	return out, stopped
}

// encodeWord appends the ids of one pre-token to out; syms is scratch space.
func (m *bpeModel) encodeWord(w string, out []int, syms []int32) []int {
	if m.ignoreMerges || m.newlineWords && strings.Trim(w, "\n") == "" {
		if id, ok := m.rawIDs[w]; ok {
			return append(out, int(id))
		}
	}
	if m.raw {
		for i := 0; i < len(w); {
			_, n := utf8.DecodeRuneInString(w[i:])
			syms = append(syms, m.charSymbol(w, i, n))
			i += n
		}
	} else {
		for i := 0; i < len(w); i++ {
			syms = append(syms, m.byteSym[w[i]])
		}
	}
	if len(syms) >= bpeHeapThreshold {
		syms = m.mergeHeap(syms)
	} else {
		syms = m.mergeScan(syms)
	}
	for _, s := range syms {
		out = m.appendSymbol(s, w, out)
	}
	return out
}

// charSymbol returns the symbol of the n-byte character at w[i:] in a raw vocab: its token,
// a synthetic symbol some merge makes, or -(i+1) for a character nothing knows (it is
// never merged).
func (m *bpeModel) charSymbol(w string, i, n int) int32 {
	c := w[i : i+n]
	if id, ok := m.rawIDs[c]; ok {
		return id
	}
	if id, ok := m.synth[c]; ok {
		return id
	}
	return -int32(i) - 1
}

// appendSymbol appends symbol s of word w: itself when it is a token, else the tokens of its
// bytes (skipping bytes that have none).
func (m *bpeModel) appendSymbol(s int32, w string, out []int) []int {
	var raw string
	switch {
	case s < 0:
		i := int(-s - 1)
		_, n := utf8.DecodeRuneInString(w[i:])
		raw = w[i : i+n]
	case s < m.nvocab:
		return append(out, int(s))
	default:
		raw = m.extra[s-m.nvocab]
	}
	for k := 0; k < len(raw); k++ {
		if id := m.byteTok[raw[k]]; id >= 0 {
			out = append(out, int(id))
		}
	}
	return out
}

// noRank marks a pair that has no merge.
const noRank = int32(^uint32(0) >> 1)

// mergeScan merges syms in place by rescanning the pair ranks after every merge: quadratic,
// but the fastest for the short words that make up almost all text.
func (m *bpeModel) mergeScan(syms []int32) []int32 {
	if len(syms) < 2 {
		return syms
	}
	var rankBuf [bpeHeapThreshold]int32
	var resBuf [bpeHeapThreshold]int32
	ranks, results := rankBuf[:0], resBuf[:0]
	for i := 0; i+1 < len(syms); i++ {
		r, res := m.lookup(syms[i], syms[i+1])
		ranks = append(ranks, r)
		results = append(results, res)
	}
	for {
		best := -1
		bestRank := noRank
		for i, r := range ranks {
			if r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			return syms
		}
		syms[best] = results[best]
		syms = append(syms[:best+1], syms[best+2:]...)
		ranks = append(ranks[:best], ranks[best+1:]...)
		results = append(results[:best], results[best+1:]...)
		if best > 0 {
			ranks[best-1], results[best-1] = m.lookup(syms[best-1], syms[best])
		}
		if best < len(ranks) {
			ranks[best], results[best] = m.lookup(syms[best], syms[best+1])
		}
	}
}

func (m *bpeModel) lookup(left, right int32) (rank, result int32) {
	if mg, ok := m.merges[pairKey(left, right)]; ok {
		return mg.rank, mg.result
	}
	return noRank, 0
}

// mergeHeap merges syms with a priority queue of candidate pairs over a linked list of
// symbols: O(n log n) for long words. Stale candidates are skipped when popped.
func (m *bpeModel) mergeHeap(syms []int32) []int32 {
	n := len(syms)
	next := make([]int32, n)
	prev := make([]int32, n)
	for i := range syms {
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
	}
	next[n-1] = -1
	q := make(pairQueue, 0, n)
	push := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		if mg, ok := m.merges[pairKey(syms[l], syms[r])]; ok {
			heap.Push(&q, pairCand{rank: mg.rank, left: l, right: r, lsym: syms[l], rsym: syms[r], result: mg.result})
		}
	}
	for i := 0; i+1 < n; i++ {
		push(int32(i), int32(i+1))
	}
	const dead = -2
	for q.Len() > 0 {
		c := heap.Pop(&q).(pairCand)
		if prev[c.left] == dead || next[c.left] != c.right || syms[c.left] != c.lsym || syms[c.right] != c.rsym {
			continue // one side has changed since this candidate was pushed
		}
		syms[c.left] = c.result
		nr := next[c.right]
		next[c.left] = nr
		if nr >= 0 {
			prev[nr] = c.left
		}
		prev[c.right] = dead
		push(prev[c.left], c.left)
		push(c.left, nr)
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

// pairCand is a candidate merge of the adjacent symbols at left and right, which held lsym
// and rsym when it was pushed; result is the merged symbol.
type pairCand struct {
	rank        int32
	left, right int32
	lsym, rsym  int32
	result      int32
}

// pairQueue orders candidates by rank, then by position (leftmost first).
type pairQueue []pairCand

func (q pairQueue) Len() int { return len(q) }
func (q pairQueue) Less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].left < q[j].left
}
func (q pairQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *pairQueue) Push(x any)   { *q = append(*q, x.(pairCand)) }
func (q *pairQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}
