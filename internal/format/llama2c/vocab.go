package llama2c

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// maxPieceLen bounds the length of one token piece and of max_token_length; real files stay
// far below it.
const maxPieceLen = 1 << 16

// Vocab is a llama2.c tokenizer file: a score and a byte string for every token id.
type Vocab struct {
	// MaxTokenLen is the longest piece length the file declares.
	MaxTokenLen int
	// Pieces holds each token's bytes (not necessarily valid UTF-8), indexed by token id.
	Pieces []string
	// Scores holds each token's merge score, indexed by token id.
	Scores []float32
}

// OpenVocab reads the tokenizer file at path. n is the vocabulary size (from the
// checkpoint header); n < 0 reads tokens until the end of the file.
func OpenVocab(path string, n int) (*Vocab, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("llama2c tokenizer: %w", err)
	}
	defer f.Close()
	v, err := ReadVocab(bufio.NewReader(f), n)
	if err != nil {
		return nil, fmt.Errorf("llama2c tokenizer %s: %w", path, err)
	}
	return v, nil
}

// ReadVocab reads a tokenizer from r: an int32 max_token_length, then per token a float32
// score, an int32 length and that many bytes. n is the number of tokens to read; n < 0
// reads until the end of r, which must then fall between two tokens.
func ReadVocab(r io.Reader, n int) (*Vocab, error) {
	var word [4]byte
	if _, err := io.ReadFull(r, word[:]); err != nil {
		return nil, fmt.Errorf("max_token_length: %w", truncated(err))
	}
	maxLen := int32(binary.LittleEndian.Uint32(word[:]))
	if maxLen < 0 || maxLen > maxPieceLen {
		return nil, fmt.Errorf("max_token_length %d is out of range (0..%d)", maxLen, maxPieceLen)
	}
	v := &Vocab{MaxTokenLen: int(maxLen)}
	if n > 0 {
		// Grow as tokens arrive rather than trusting n for a large allocation.
		v.Pieces = make([]string, 0, min(n, 1<<16))
		v.Scores = make([]float32, 0, min(n, 1<<16))
	}
	var buf []byte
	for id := 0; n < 0 || id < n; id++ {
		if _, err := io.ReadFull(r, word[:]); err != nil {
			if n < 0 && errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("token %d: score: %w", id, truncated(err))
		}
		score := math.Float32frombits(binary.LittleEndian.Uint32(word[:]))
		if _, err := io.ReadFull(r, word[:]); err != nil {
			return nil, fmt.Errorf("token %d: length: %w", id, truncated(err))
		}
		size := int32(binary.LittleEndian.Uint32(word[:]))
		if size < 0 || size > maxPieceLen {
			return nil, fmt.Errorf("token %d: length %d is out of range (0..%d)", id, size, maxPieceLen)
		}
		if cap(buf) < int(size) {
			buf = make([]byte, size)
		}
		buf = buf[:size]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("token %d: %d bytes of text: %w", id, size, truncated(err))
		}
		v.Pieces = append(v.Pieces, string(buf))
		v.Scores = append(v.Scores, score)
	}
	return v, nil
}

// ParseVocab parses a tokenizer file held in memory (see ReadVocab).
func ParseVocab(data []byte, n int) (*Vocab, error) {
	v, err := ReadVocab(bytes.NewReader(data), n)
	if err != nil {
		return nil, fmt.Errorf("llama2c tokenizer: %w", err)
	}
	return v, nil
}

// WriteVocab writes v in llama2.c's tokenizer format.
func WriteVocab(w io.Writer, v *Vocab) error {
	if len(v.Pieces) != len(v.Scores) {
		return fmt.Errorf("llama2c tokenizer: %d pieces but %d scores", len(v.Pieces), len(v.Scores))
	}
	bw := bufio.NewWriter(w)
	b := binary.LittleEndian.AppendUint32(nil, uint32(int32(v.MaxTokenLen)))
	bw.Write(b)
	for i, p := range v.Pieces {
		if len(p) > maxPieceLen {
			return fmt.Errorf("llama2c tokenizer: token %d: length %d exceeds %d", i, len(p), maxPieceLen)
		}
		b = binary.LittleEndian.AppendUint32(b[:0], math.Float32bits(v.Scores[i]))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
		bw.Write(b)
		bw.WriteString(p)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("llama2c tokenizer: %w", err)
	}
	return nil
}

// truncated turns an early end of input into a clearer error.
func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("file is truncated")
	}
	return err
}
