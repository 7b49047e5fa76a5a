package chat

import (
	"bytes"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
)

// sameValue reports whether a and b are the same value: the same kinds, the same contents
// (floats by their bits), dict keys in the same order.
func sameValue(a, b jinja.Value) bool {
	switch {
	case a.IsUndefined(), a.IsNone():
		return a.IsUndefined() == b.IsUndefined() && a.IsNone() == b.IsNone()
	case a.IsBool():
		return b.IsBool() && a.AsBool() == b.AsBool()
	case a.IsInt():
		return b.IsInt() && a.AsInt() == b.AsInt()
	case a.IsFloat():
		return b.IsFloat() && math.Float64bits(a.AsFloat()) == math.Float64bits(b.AsFloat())
	case a.IsString():
		return b.IsString() && a.AsString() == b.AsString()
	case a.IsList():
		if !b.IsList() || a.AsList().Len() != b.AsList().Len() {
			return false
		}
		for i, item := range a.AsList().Items {
			if !sameValue(item, b.AsList().Items[i]) {
				return false
			}
		}
		return true
	case a.IsDict():
		if !b.IsDict() || !slices.Equal(a.AsDict().Keys, b.AsDict().Keys) {
			return false
		}
		for _, k := range a.AsDict().Keys {
			if !sameValue(a.AsDict().Data[k], b.AsDict().Data[k]) {
				return false
			}
		}
		return true
	}
	return false
}

// sameVariables reports whether two sets of template variables are the same.
func sameVariables(a, b map[string]jinja.Value) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !sameValue(v, w) {
			return false
		}
	}
	return true
}

// testVariables are the variables of the tool conversation with extras of every kind.
func testVariables(t testing.TB) map[string]jinja.Value {
	t.Helper()
	data, err := variables(Input{Messages: toolConversation(), Tools: []map[string]any{weatherTool()},
		Extra: map[string]any{"i": -7, "f": 2.0, "nan": math.NaN(), "b": true, "none": nil, "s": "é\x00",
			"nested": []any{map[string]any{"z": 1, "a": []any{}}}, "u": jinja.Undefined()}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// encodeRenderFrame is a whole render frame.
func encodeRenderFrame(t testing.TB, id uint64, source *string, now time.Time, data map[string]jinja.Value) []byte {
	t.Helper()
	e := encoder{}
	if err := e.variables(data); err != nil {
		t.Fatal(err)
	}
	return append(encodeRenderHead(id, source, now), e.buf...)
}

// TestWireRoundTrip: a render request decodes to what was encoded: the id, the source, the
// clock with its zone, and every variable with its kind (2.0 stays a float, key order
// stays).
func TestWireRoundTrip(t *testing.T) {
	data := testVariables(t)
	src := "{{ x }}"
	now := time.Date(2025, 3, 7, 9, 5, 3, 12345, time.FixedZone("CET", 3600))
	req, err := decodeRender(encodeRenderFrame(t, 42, &src, now, data))
	if err != nil {
		t.Fatal(err)
	}
	if req.id != 42 || !req.hasSource || req.source != src || !req.now.Equal(now) || req.now.Format(time.RFC3339Nano+" MST") != now.Format(time.RFC3339Nano+" MST") {
		t.Errorf("decoded %d %v %q %v", req.id, req.hasSource, req.source, req.now)
	}
	if !sameVariables(req.data, data) {
		t.Errorf("variables changed on the way")
	}
	if !req.data["f"].IsFloat() || !req.data["i"].IsInt() {
		t.Errorf("f is %v, i is %v: the kinds changed", req.data["f"], req.data["i"])
	}
	if req, err := decodeRender(encodeRenderFrame(t, 1, nil, now, nil)); err != nil || req.hasSource || len(req.data) != 0 {
		t.Errorf("without source: %+v, %v", req, err)
	}
}

// TestWireRefusesCallables: a callable in Extra cannot cross to a worker: an error naming
// the variable.
func TestWireRefusesCallables(t *testing.T) {
	e := encoder{}
	err := e.variables(map[string]jinja.Value{"f": jinja.NewList([]jinja.Value{jinja.NewCallable("c", nil)})})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("f: a callable")) {
		t.Errorf("error %v", err)
	}
}

// TestWireRejectsBadFrames: truncated, overlong, unknown and too deep input are errors.
func TestWireRejectsBadFrames(t *testing.T) {
	good := encodeRenderFrame(t, 1, nil, time.Unix(0, 0), map[string]jinja.Value{"a": jinja.NewString("xyz")})
	deep := encodeRenderHead(1, nil, time.Unix(0, 0))
	deep = append(deep, 1, 1, 'a')
	for range maxWireDepth + 2 {
		deep = append(deep, tagList, 1)
	}
	deep = append(deep, tagNone)
	for name, b := range map[string][]byte{
		"empty":        {},
		"truncated":    good[:len(good)-1],
		"left over":    append(slices.Clone(good), 0),
		"not a render": append([]byte{'Q'}, good[1:]...),
		"huge count":   append(encodeRenderHead(1, nil, time.Unix(0, 0)), 0xff, 0xff, 0xff, 0xff, 0x0f),
		"bad tag":      append(encodeRenderHead(1, nil, time.Unix(0, 0)), 1, 1, 'a', 99),
		"too deep":     deep,
	} {
		if _, err := decodeRender(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	for name, b := range map[string][]byte{"empty": {}, "bad tag": {'?', 0}, "raised without message": {respRaised, 0}, "left over": {respOK, 0, 0}} {
		if _, _, err := decodeResponse(b); err == nil {
			t.Errorf("response %s: no error", name)
		}
	}
	if _, err := readFrame(bytes.NewReader([]byte{0, 0, 1, 0, 'x'}), 100); err == nil {
		t.Errorf("a frame of 256 bytes read under a limit of 100")
	}
	if _, err := decodeHello(encodeHello(Limits{MaxDepth: 1, MaxIterations: 1, MaxOutputBytes: 1, MaxStackBytes: 1, MaxMemoryBytes: 1})); err == nil {
		t.Errorf("a hello with a zero timeout accepted")
	}
	l := Limits{}.withDefaults()
	if got, err := decodeHello(encodeHello(l)); err != nil || got != l {
		t.Errorf("hello round trip: %+v, %v", got, err)
	}
}

// FuzzDecodeRender decodes fuzzed render frames: never a panic, and what decodes encodes
// back to the same request.
func FuzzDecodeRender(f *testing.F) {
	src := "{{ messages }}"
	f.Add(encodeRenderFrame(f, 3, &src, time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), testVariables(f)))
	f.Add(encodeRenderFrame(f, 0, nil, time.Unix(0, 0), nil))
	f.Add([]byte{msgRender, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeRender(b)
		if err != nil {
			return
		}
		var source *string
		if req.hasSource {
			source = &req.source
		}
		again, err := decodeRender(encodeRenderFrame(t, req.id, source, req.now, req.data))
		if err != nil {
			t.Fatalf("re-encoded request does not decode: %v", err)
		}
		if again.id != req.id || again.hasSource != req.hasSource || again.source != req.source || !again.now.Equal(req.now) || !sameVariables(again.data, req.data) {
			t.Fatalf("request changed on re-encoding")
		}
	})
}

// FuzzDecodeResponse decodes fuzzed response frames: never a panic, and what decodes
// encodes back to the same response.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(encodeResponse(respOK, "prompt"))
	f.Add(encodeResponse(respRaised, "chat template: no", "no"))
	f.Add(encodeResponse(respLimit, string(LimitOutput)))
	f.Fuzz(func(t *testing.T, b []byte) {
		tag, texts, err := decodeResponse(b)
		if err != nil {
			return
		}
		tag2, texts2, err := decodeResponse(encodeResponse(tag, texts...))
		if err != nil || tag2 != tag || !slices.Equal(texts2, texts) {
			t.Fatalf("response %q %q re-encoded as %q %q (%v)", tag, texts, tag2, texts2, err)
		}
	})
}

// FuzzReadFrame reads fuzzed streams as frames of at most 64 bytes: never a panic, never
// more than the limit, and a frame read is the bytes after its length.
func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	writeFrame(&buf, []byte("ab"), []byte("c"))
	f.Add(buf.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		frame, err := readFrame(bytes.NewReader(b), 64)
		if err != nil {
			return
		}
		if len(frame) > 64 || !bytes.Equal(frame, b[4:4+len(frame)]) {
			t.Fatalf("frame %q from %q", frame, b)
		}
	})
}
