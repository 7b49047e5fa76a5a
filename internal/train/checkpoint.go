package train

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// A checkpoint file is the magic "KVTRAIN1", a little-endian uint32 length and that many
// bytes of JSON header (checkpointHeader), then for each Param in Params order its
// weights, then AdamW's first and second moments, all little-endian float32.
const checkpointMagic = "KVTRAIN1"

type checkpointHeader struct {
	Config   Config  `json:"config"`
	Options  Options `json:"options"`
	DataHash uint64  `json:"data_hash"`
	Step     int     `json:"step"`
	Params   []struct {
		Name string `json:"name"`
		Size int    `json:"size"`
	} `json:"params"`
}

// SaveCheckpoint writes the trainer's whole state to path, atomically: a temporary file
// in the same folder renamed over path once complete.
func (t *Trainer) SaveCheckpoint(path string) error {
	h := checkpointHeader{Config: t.Model.Config, Options: t.opt, DataHash: t.data.Hash(), Step: t.Step}
	ps := t.Model.Params()
	for _, p := range ps {
		h.Params = append(h.Params, struct {
			Name string `json:"name"`
			Size int    `json:"size"`
		}{p.Name, len(p.W)})
	}
	hdr, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return writeAtomic(path, func(w io.Writer) error {
		if _, err := io.WriteString(w, checkpointMagic); err != nil {
			return err
		}
		if err := binary.Write(w, binary.LittleEndian, uint32(len(hdr))); err != nil {
			return err
		}
		if _, err := w.Write(hdr); err != nil {
			return err
		}
		for _, group := range [][][]float32{weightsOf(ps), t.state.m, t.state.v} {
			for _, x := range group {
				if err := writeFloats(w, x); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// LoadCheckpoint restores a state written by SaveCheckpoint into t, whose model, options
// and data must be those the checkpoint was made with.
func (t *Trainer) LoadCheckpoint(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	magic := make([]byte, len(checkpointMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != checkpointMagic {
		return fmt.Errorf("checkpoint %s: not a kvasir training checkpoint", path)
	}
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil || n > 1<<24 {
		return fmt.Errorf("checkpoint %s: bad header", path)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	var h checkpointHeader
	if err := json.Unmarshal(hdr, &h); err != nil {
		return fmt.Errorf("checkpoint %s: header: %w", path, err)
	}
	if err := sameJSON("student config", h.Config, t.Model.Config); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := sameJSON("training options", h.Options, t.opt); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if h.DataHash != t.data.Hash() {
		return fmt.Errorf("checkpoint %s: made on other training data (or another --ctx)", path)
	}
	ps := t.Model.Params()
	if len(h.Params) != len(ps) {
		return fmt.Errorf("checkpoint %s: %d tensors, the model has %d", path, len(h.Params), len(ps))
	}
	for i, p := range ps {
		if h.Params[i].Name != p.Name || h.Params[i].Size != len(p.W) {
			return fmt.Errorf("checkpoint %s: tensor %d is %s of %d values, want %s of %d", path, i, h.Params[i].Name, h.Params[i].Size, p.Name, len(p.W))
		}
	}
	// Read everything before touching the trainer, so that a truncated file changes nothing.
	groups := [][][]float32{weightsOf(ps), t.state.m, t.state.v}
	read := make([][][]float32, len(groups))
	for g, group := range groups {
		for _, x := range group {
			y := make([]float32, len(x))
			if err := readFloats(r, y); err != nil {
				return fmt.Errorf("checkpoint %s: %w", path, err)
			}
			read[g] = append(read[g], y)
		}
	}
	for g, group := range groups {
		for i, x := range group {
			copy(x, read[g][i])
		}
	}
	t.Step = h.Step
	return nil
}

// sameJSON reports an error naming what when a and b differ.
func sameJSON(what string, a, b any) error {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		return fmt.Errorf("made with another %s: %s, now %s", what, ja, jb)
	}
	return nil
}

func weightsOf(ps []Param) [][]float32 {
	out := make([][]float32, len(ps))
	for i, p := range ps {
		out[i] = p.W
	}
	return out
}

func writeFloats(w io.Writer, x []float32) error {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	_, err := w.Write(b)
	return err
}

func readFloats(r io.Reader, x []float32) error {
	b := make([]byte, 4*len(x))
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}

// writeAtomic writes a file through fill into a temporary file beside path, syncs it and
// renames it over path; on any error the temporary file is removed and path is untouched.
func writeAtomic(path string, fill func(w io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = fill(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// A top-k cache file is the magic "KVTOPK01", a uint32 length and that many bytes of key
// (what the logits were computed from), uint32 k, uint64 positions, then the ids (int32)
// and logits (float32) of every position, little-endian.
const topKMagic = "KVTOPK01"

// SaveTopK writes the teacher's top k to path atomically under key.
func SaveTopK(path, key string, t TopK) error {
	return writeAtomic(path, func(w io.Writer) error {
		io.WriteString(w, topKMagic)
		binary.Write(w, binary.LittleEndian, uint32(len(key)))
		io.WriteString(w, key)
		binary.Write(w, binary.LittleEndian, uint32(t.K))
		binary.Write(w, binary.LittleEndian, uint64(len(t.IDs)/max(t.K, 1)))
		ids := make([]float32, len(t.IDs))
		for i, id := range t.IDs {
			ids[i] = math.Float32frombits(uint32(id))
		}
		if err := writeFloats(w, ids); err != nil {
			return err
		}
		return writeFloats(w, t.Logits)
	})
}

// LoadTopK reads a cache written by SaveTopK. ok is false (with no error) when the file
// does not exist or was written under another key.
func LoadTopK(path, key string) (t TopK, ok bool, err error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return TopK{}, false, nil
	}
	if err != nil {
		return TopK{}, false, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	head := make([]byte, len(topKMagic))
	var n uint32
	if _, err := io.ReadFull(r, head); err != nil || string(head) != topKMagic {
		return TopK{}, false, fmt.Errorf("teacher cache %s: not a top-k cache", path)
	}
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil || n > 1<<16 {
		return TopK{}, false, fmt.Errorf("teacher cache %s: bad header", path)
	}
	got := make([]byte, n)
	if _, err := io.ReadFull(r, got); err != nil {
		return TopK{}, false, fmt.Errorf("teacher cache %s: %w", path, err)
	}
	if string(got) != key {
		return TopK{}, false, nil
	}
	var k uint32
	var pos uint64
	if err := binary.Read(r, binary.LittleEndian, &k); err != nil {
		return TopK{}, false, fmt.Errorf("teacher cache %s: %w", path, err)
	}
	if err := binary.Read(r, binary.LittleEndian, &pos); err != nil {
		return TopK{}, false, fmt.Errorf("teacher cache %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		return TopK{}, false, err
	}
	if k == 0 || pos > uint64(st.Size())/(uint64(k)*8) {
		return TopK{}, false, fmt.Errorf("teacher cache %s: %d positions x k=%d do not fit its %d bytes", path, pos, k, st.Size())
	}
	count := int(pos) * int(k)
	ids := make([]float32, count)
	t = TopK{K: int(k), IDs: make([]int32, count), Logits: make([]float32, count)}
	if err := readFloats(r, ids); err != nil {
		return TopK{}, false, fmt.Errorf("teacher cache %s: %w", path, err)
	}
	for i, v := range ids {
		t.IDs[i] = int32(math.Float32bits(v))
	}
	if err := readFloats(r, t.Logits); err != nil {
		return TopK{}, false, fmt.Errorf("teacher cache %s: %w", path, err)
	}
	return t, true, nil
}
