package chat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/ardanlabs/jinja"
)

// The sandbox's parent and its workers speak in frames over pipes: a 4-byte big-endian
// length, then that many bytes. The parent sends a hello (the limits) and then render
// requests; the worker answers each with one response.
//
//	hello:    'H' maxDepth maxIterations maxOutput maxStack maxMemory timeout (uvarints)
//	render:   'R' id (uvarint), hasSource (byte), [source (string)], now, variables
//	now:      unix nanoseconds (varint), zone name (string), zone offset in seconds (varint)
//	response: 'K' output | 'X' error text, raised message | 'E' error text |
//	          'C' compile error text | 'L' limit name
//
// Strings are a uvarint length and the bytes; the variables are a count and that many
// name, value pairs; a value is a tag byte and its payload (see the tag constants).

// Message tags.
const (
	msgHello    = 'H'
	msgRender   = 'R'
	respOK      = 'K'
	respRaised  = 'X'
	respError   = 'E'
	respCompile = 'C'
	respLimit   = 'L'
)

// Value tags.
const (
	tagUndefined = iota
	tagNone
	tagFalse
	tagTrue
	tagInt    // varint
	tagFloat  // 8 bytes, IEEE 754 bits, little-endian
	tagString // string
	tagList   // count, then the items
	tagDict   // count, then key (string), value pairs in order
)

// maxWireDepth bounds the nesting of values on the wire: what toValue accepts, plus the
// levels of messages, tools and content around it.
const maxWireDepth = maxDepth + 8

// writeFrame writes the frame made of the parts, which are concatenated.
func writeFrame(w io.Writer, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if uint64(n) > math.MaxUint32 {
		return fmt.Errorf("frame of %d bytes is too long", n)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(n))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// readFrame reads one frame of at most max bytes.
func readFrame(r io.Reader, max int64) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int64(binary.BigEndian.Uint32(hdr[:]))
	if n > max {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// encoder appends the wire form of values to buf.
type encoder struct {
	buf []byte
}

func (e *encoder) byte(b byte)     { e.buf = append(e.buf, b) }
func (e *encoder) uint(u uint64)   { e.buf = binary.AppendUvarint(e.buf, u) }
func (e *encoder) int(i int64)     { e.buf = binary.AppendVarint(e.buf, i) }
func (e *encoder) string(s string) { e.uint(uint64(len(s))); e.buf = append(e.buf, s...) }
func (e *encoder) time(t time.Time) {
	name, off := t.Zone()
	e.int(t.UnixNano())
	e.string(name)
	e.int(int64(off))
}

// value appends v; path names it in errors.
func (e *encoder) value(v jinja.Value, path string, depth int) error {
	if depth > maxWireDepth {
		return fmt.Errorf("%s: nested deeper than %d levels", path, maxWireDepth)
	}
	switch {
	case v.IsUndefined():
		e.byte(tagUndefined)
	case v.IsNone():
		e.byte(tagNone)
	case v.IsBool() && v.AsBool():
		e.byte(tagTrue)
	case v.IsBool():
		e.byte(tagFalse)
	case v.IsInt():
		e.byte(tagInt)
		e.int(v.AsInt())
	case v.IsFloat():
		e.byte(tagFloat)
		e.buf = binary.LittleEndian.AppendUint64(e.buf, math.Float64bits(v.AsFloat()))
	case v.IsString():
		e.byte(tagString)
		e.string(v.AsString())
	case v.IsList():
		items := v.AsList().Items
		e.byte(tagList)
		e.uint(uint64(len(items)))
		for _, item := range items {
			if err := e.value(item, path, depth+1); err != nil {
				return err
			}
		}
	case v.IsDict():
		d := v.AsDict()
		e.byte(tagDict)
		e.uint(uint64(len(d.Keys)))
		for _, k := range d.Keys {
			e.string(k)
			if err := e.value(d.Data[k], path, depth+1); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%s: a callable cannot be sent to the sandbox", path)
	}
	return nil
}

// variables appends the template variables data.
func (e *encoder) variables(data map[string]jinja.Value) error {
	e.uint(uint64(len(data)))
	for k, v := range data {
		e.string(k)
		if err := e.value(v, k, 0); err != nil {
			return fmt.Errorf("chat template: variable %w", err)
		}
	}
	return nil
}

// decoder reads the wire form from buf; its first error sticks, and every read after it
// returns a zero value.
type decoder struct {
	buf []byte
	err error
}

// fail records the first error.
func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
	d.buf = nil
}

func (d *decoder) byte() byte {
	if len(d.buf) < 1 {
		d.fail("truncated")
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) uint() uint64 {
	u, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.buf = d.buf[n:]
	return u
}

func (d *decoder) int() int64 {
	i, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return i
}

// count reads a count of items of at least one byte each, so that it cannot ask for more
// than the bytes left.
func (d *decoder) count() int {
	n := d.uint()
	if n > uint64(len(d.buf)) {
		d.fail("count %d exceeds the %d bytes left", n, len(d.buf))
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.count()
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}

func (d *decoder) time() time.Time {
	ns := d.int()
	name := d.string()
	off := d.int()
	if off < -24*3600 || off > 24*3600 {
		d.fail("zone offset %d out of range", off)
	}
	return time.Unix(0, ns).In(time.FixedZone(name, int(off)))
}

func (d *decoder) value(depth int) jinja.Value {
	if depth > maxWireDepth {
		d.fail("nested deeper than %d levels", maxWireDepth)
		return jinja.Undefined()
	}
	switch tag := d.byte(); tag {
	case tagUndefined:
		return jinja.Undefined()
	case tagNone:
		return jinja.None()
	case tagFalse, tagTrue:
		return jinja.NewBool(tag == tagTrue)
	case tagInt:
		return jinja.NewInt(d.int())
	case tagFloat:
		if len(d.buf) < 8 {
			d.fail("truncated float")
			return jinja.Undefined()
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(d.buf))
		d.buf = d.buf[8:]
		return jinja.NewFloat(f)
	case tagString:
		return jinja.NewString(d.string())
	case tagList:
		items := make([]jinja.Value, d.count())
		for i := range items {
			items[i] = d.value(depth + 1)
		}
		return jinja.NewList(items)
	case tagDict:
		v := jinja.NewDict()
		dict := v.AsDict()
		for range d.count() {
			k := d.string()
			dict.Set(k, d.value(depth+1))
		}
		return v
	default:
		d.fail("unknown value tag %d", tag)
		return jinja.Undefined()
	}
}

// variables reads the template variables.
func (d *decoder) variables() map[string]jinja.Value {
	n := d.count()
	data := make(map[string]jinja.Value, n)
	for range n {
		k := d.string()
		data[k] = d.value(0)
	}
	return data
}

// finish returns the first error, or an error when bytes are left over.
func (d *decoder) finish() error {
	if d.err == nil && len(d.buf) > 0 {
		d.err = fmt.Errorf("%d bytes left over", len(d.buf))
	}
	return d.err
}

// encodeHello is the hello frame that hands a worker its limits.
func encodeHello(l Limits) []byte {
	e := encoder{}
	e.byte(msgHello)
	for _, v := range []int64{int64(l.MaxDepth), l.MaxIterations, l.MaxOutputBytes, l.MaxStackBytes, l.MaxMemoryBytes, int64(l.Timeout)} {
		e.uint(uint64(v))
	}
	return e.buf
}

// decodeHello reads a hello frame; every limit must be positive.
func decodeHello(b []byte) (Limits, error) {
	d := decoder{buf: b}
	if d.byte() != msgHello {
		return Limits{}, errors.New("sandbox worker: the first frame is not a hello")
	}
	var v [6]int64
	for i := range v {
		if v[i] = int64(d.uint()); v[i] <= 0 {
			d.fail("limit %d is %d, not positive", i, v[i])
		}
	}
	if v[0] > math.MaxInt32 {
		d.fail("depth limit %d too large", v[0])
	}
	if err := d.finish(); err != nil {
		return Limits{}, fmt.Errorf("sandbox worker: hello: %w", err)
	}
	return Limits{MaxDepth: int(v[0]), MaxIterations: v[1], MaxOutputBytes: v[2], MaxStackBytes: v[3],
		MaxMemoryBytes: v[4], Timeout: time.Duration(v[5])}, nil
}

// renderRequest is a decoded render frame.
type renderRequest struct {
	id        uint64
	hasSource bool
	source    string
	now       time.Time
	data      map[string]jinja.Value
}

// encodeRenderHead is the start of a render frame, up to and with the clock; the
// variables, encoded once, follow it.
func encodeRenderHead(id uint64, source *string, now time.Time) []byte {
	e := encoder{}
	e.byte(msgRender)
	e.uint(id)
	if source == nil {
		e.byte(0)
	} else {
		e.byte(1)
		e.string(*source)
	}
	e.time(now)
	return e.buf
}

// decodeRender reads a render frame.
func decodeRender(b []byte) (renderRequest, error) {
	d := decoder{buf: b}
	var r renderRequest
	if d.byte() != msgRender {
		d.fail("not a render request")
	}
	r.id = d.uint()
	switch d.byte() {
	case 0:
	case 1:
		r.hasSource = true
		r.source = d.string()
	default:
		d.fail("bad source flag")
	}
	r.now = d.time()
	r.data = d.variables()
	if err := d.finish(); err != nil {
		return renderRequest{}, fmt.Errorf("sandbox worker: render request: %w", err)
	}
	return r, nil
}

// encodeResponse is the response frame of kind tag carrying texts: the output (respOK), the
// error text (respError, respCompile), the error text and the template's message
// (respRaised), or the limit's name (respLimit).
func encodeResponse(tag byte, texts ...string) []byte {
	n := 8
	for _, t := range texts {
		n += len(t) + 8
	}
	e := encoder{buf: make([]byte, 0, n)}
	e.byte(tag)
	for _, t := range texts {
		e.string(t)
	}
	return e.buf
}

// decodeResponse reads a response frame: its tag and its texts.
func decodeResponse(b []byte) (tag byte, texts []string, err error) {
	d := decoder{buf: b}
	tag = d.byte()
	want := 1
	switch tag {
	case respOK, respError, respCompile, respLimit:
	case respRaised:
		want = 2
	default:
		d.fail("unknown response tag %d", tag)
	}
	for range want {
		texts = append(texts, d.string())
	}
	if err := d.finish(); err != nil {
		return 0, nil, fmt.Errorf("sandbox worker: response: %w", err)
	}
	return tag, texts, nil
}
