package toolcall

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/structured"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// markerVocab is the 256 bytes, an end-of-generation token and Command R7B's action markers
// as control tokens, as a vocabulary that makes them special has them.
type markerVocab struct{}

const (
	markerEOG = 256 + iota
	markerStartAction
	markerEndAction
)

var markerText = map[int]string{markerStartAction: "<|START_ACTION|>", markerEndAction: "<|END_ACTION|>"}

func (markerVocab) NumTokens() int { return 259 }
func (markerVocab) TokenBytes(id int) []byte {
	if id < 256 {
		return []byte{byte(id)}
	}
	return []byte(markerText[id])
}
func (markerVocab) IsSpecial(id int) bool { return id >= 256 }
func (markerVocab) IsEOG(id int) bool     { return id == markerEOG }

// EncodePiece spells a piece in byte tokens, so the masker can jump forward.
func (markerVocab) EncodePiece(piece []byte) []int {
	ids := make([]int, len(piece))
	for i, b := range piece {
		ids[i] = int(b)
	}
	return ids
}

// markerGrammar binds the tool_choice grammar of parser to the marker vocabulary.
func markerGrammar(t *testing.T, parser string) *structured.TokenGrammar {
	t.Helper()
	src, err := Grammar(parser, grammarTools, "", true)
	if err != nil {
		t.Fatal(err)
	}
	g, err := structured.ParseGBNF(src)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := structured.Compile(g, structured.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	trie, err := structured.NewTokenTrie(markerVocab{})
	if err != nil {
		t.Fatal(err)
	}
	return structured.NewTokenGrammar(cg, trie, markerVocab{})
}

// spelled is the text of tokens of the marker vocabulary.
func spelled(tokens []int32) string {
	var b strings.Builder
	for _, id := range tokens {
		b.Write(markerVocab{}.TokenBytes(int(id)))
	}
	return b.String()
}

// TestGrammarControlTokenMarkers: where a family's marker is a control token of the
// vocabulary, the grammar (which names text) holds the reply to the marker's text in
// ordinary tokens, never the control token, and jump-forward writes the rest of a marker
// once its first byte is sampled; under tool_choice auto the model's own control token
// completes the trigger and the lazy grammar takes over, and the closing marker after the
// calls is forced as text.
func TestGrammarControlTokenMarkers(t *testing.T) {
	g := markerGrammar(t, CommandR7B)
	k := g.NewMasker()
	m := k.Mask()
	if m.Allows(markerStartAction) || m.Allows(markerEndAction) || !m.Allows('<') {
		t.Fatalf("first mask: control markers allowed %v %v, '<' %v; want the text's first byte only",
			m.Allows(markerStartAction), m.Allows(markerEndAction), m.Allows('<'))
	}
	if err := k.Accept([]int32{'<'}); err != nil {
		t.Fatal(err)
	}
	replace, forced := k.JumpForward(1000)
	if got := spelled(forced); replace != 0 || !strings.HasPrefix(got, "|START_ACTION|>[{\"tool_call_id\":") {
		t.Errorf("after '<' jump-forward replaces %d and writes %q, want the rest of <|START_ACTION|>[{\"tool_call_id\":", replace, got)
	}

	// tool_choice auto: text, then the model's control token.
	z, err := g.NewLazy(Triggers(CommandR7B))
	if err != nil {
		t.Fatal(err)
	}
	var prose []int32
	for _, b := range []byte("Checking. ") {
		prose = append(prose, int32(b))
	}
	if err := z.Accept(prose); err != nil || z.Triggered() {
		t.Fatalf("prose: %v, triggered %v", err, z.Triggered())
	}
	if err := z.Accept([]int32{markerStartAction}); err != nil || !z.Triggered() {
		t.Fatalf("the control token <|START_ACTION|>: %v, triggered %v; want the grammar to take over", err, z.Triggered())
	}
	call := `[{"tool_call_id":"3","tool_name":"now","parameters":{}}]`
	for i := 0; i < len(call); i++ {
		if m := z.Mask(); m.Allows(markerEndAction) {
			t.Fatalf("the control token <|END_ACTION|> allowed after %q", call[:i])
		}
		if err := z.Accept([]int32{int32(call[i])}); err != nil {
			t.Fatalf("after %q: %v", call[:i], err)
		}
	}
	var f sample.Forcer = z
	if _, forced := f.JumpForward(1000); spelled(forced) != "<|END_ACTION|" {
		t.Errorf("after the calls jump-forward writes %q, want <|END_ACTION| (its last token left to sampling)", spelled(forced))
	}
}

// TestGrammarUserDefinedMarker: a marker that is a user-defined token (Qwen3's <tool_call>,
// "special": false in its tokenizer) stays one token the hermes grammar allows.
func TestGrammarUserDefinedMarker(t *testing.T) {
	dir := testdata.Path(t, "tokenizers/qwen3")
	js, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	voc, err := tokenizer.VocabFromHF(js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(voc)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tok.TokenID("<tool_call>"); !ok || tok.IsSpecial(id) {
		t.Fatalf("Qwen3's <tool_call> is token %d (found %v, special %v), want a user-defined token", id, ok, tok.IsSpecial(id))
	}
	// The same on a small vocabulary (Qwen3's whole one costs a minute to bind): the bytes
	// and <tool_call> as a token that is not special.
	v := userMarkerVocab{}
	src, err := Grammar(Hermes, grammarTools, "", true)
	if err != nil {
		t.Fatal(err)
	}
	gg, err := structured.ParseGBNF(src)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := structured.Compile(gg, structured.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	trie, err := structured.NewTokenTrie(v)
	if err != nil {
		t.Fatal(err)
	}
	k := structured.NewTokenGrammar(cg, trie, v).NewMasker()
	if !k.Mask().Allows(userMarker) {
		t.Fatal("the hermes grammar's first mask refuses the <tool_call> token")
	}
	if err := k.Accept([]int32{userMarker}); err != nil {
		t.Errorf("accepting <tool_call>: %v", err)
	}
}

// userMarkerVocab is the 256 bytes, an end-of-generation token and <tool_call> as a
// user-defined token.
type userMarkerVocab struct{}

const userMarker = 257

func (userMarkerVocab) NumTokens() int { return 258 }
func (userMarkerVocab) TokenBytes(id int) []byte {
	switch {
	case id < 256:
		return []byte{byte(id)}
	case id == userMarker:
		return []byte("<tool_call>")
	}
	return nil
}
func (userMarkerVocab) IsSpecial(id int) bool { return id == 256 }
func (userMarkerVocab) IsEOG(id int) bool     { return id == 256 }
