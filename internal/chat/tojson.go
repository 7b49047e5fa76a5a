package chat

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// pyToJSON implements transformers' tojson filter: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False), each overridable by keyword.
func pyToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("tojson: missing value")
	}
	enc := jsonEncoder{itemSep: ", ", keySep: ": "}
	if v, ok := kwargs["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			enc.indent, enc.pretty = strings.Repeat(" ", int(max(0, min(v.AsInt(), 64)))), true
		case v.IsString():
			enc.indent, enc.pretty = v.AsString(), true
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an int or a string")
		}
		enc.itemSep = ","
	}
	if v, ok := kwargs["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Undefined(), fmt.Errorf("tojson: separators must be two strings")
		}
		enc.itemSep, enc.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	if v, ok := kwargs["ensure_ascii"]; ok {
		enc.ascii = v.IsTruthy()
	}
	if v, ok := kwargs["sort_keys"]; ok {
		enc.sortKeys = v.IsTruthy()
	}
	var b strings.Builder
	if err := enc.value(&b, args[0], 0); err != nil {
		return jinja.Undefined(), fmt.Errorf("tojson: %w", err)
	}
	return jinja.NewString(b.String()), nil
}

// jsonEncoder writes values the way Python's json.dumps does.
type jsonEncoder struct {
	itemSep, keySep string
	indent          string
	pretty          bool
	ascii           bool
	sortKeys        bool
}

// newline starts a new line indented to level, when pretty-printing.
func (e *jsonEncoder) newline(b *strings.Builder, level int) {
	if !e.pretty {
		return
	}
	b.WriteByte('\n')
	for range level {
		b.WriteString(e.indent)
	}
}

func (e *jsonEncoder) value(b *strings.Builder, v jinja.Value, level int) error {
	if level > maxDepth {
		return fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	switch {
	case v.IsNone(), v.IsUndefined():
		b.WriteString("null")
	case v.IsBool():
		b.WriteString(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloat(v.AsFloat()))
	case v.IsString():
		e.str(b, v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				b.WriteString(e.itemSep)
			}
			e.newline(b, level+1)
			if err := e.value(b, item, level+1); err != nil {
				return err
			}
		}
		e.newline(b, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.OrderedKeys()
		if len(keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		if e.sortKeys {
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(e.itemSep)
			}
			e.newline(b, level+1)
			e.str(b, k)
			b.WriteString(e.keySep)
			val, _ := d.Get(k)
			if err := e.value(b, val, level+1); err != nil {
				return err
			}
		}
		e.newline(b, level)
		b.WriteByte('}')
	default:
		return fmt.Errorf("value of kind %v is not JSON serializable", v.String())
	}
	return nil
}

// str writes s as a JSON string with Python's escapes: \" \\ \n \r \t \b \f, \u00XX for
// other control characters, and \uXXXX (surrogate pairs above the BMP) for non-ASCII when
// ensure_ascii is set.
func (e *jsonEncoder) str(b *strings.Builder, s string) {
	b.WriteByte('"')
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case r < utf8.RuneSelf || !e.ascii:
				b.WriteRune(r)
			case r > 0xFFFF:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
			default:
				fmt.Fprintf(b, `\u%04x`, r)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloat formats f as Python's float repr: the shortest round-tripping digits, positional
// for exponents in [-4, 16) with at least one decimal ("1.0"), scientific otherwise ("1e+16").
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // like -1.2345e+06
	mant, expText, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expText)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
