package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// GPT-2's byte-level alphabet (bytes_to_unicode): every byte is shown as one printable
// character, so that token texts never hold raw control bytes or spaces. Printable Latin-1
// bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the 68 others map, in byte order,
// to U+0100 and up (so ' ' is 'Ġ' and '\n' is 'Ċ').

// byteRunes maps a byte to its character in the alphabet.
var byteRunes = func() (t [256]rune) {
	next := rune(256)
	for b := range t {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			t[b] = rune(b)
		} else {
			t[b] = next
			next++
		}
	}
	return t
}()

// runeBytes is byteRunes' inverse over U+0000..U+0143: the byte plus one, 0 where the
// character is not in the alphabet.
var runeBytes = func() (t [0x144]uint16) {
	for b, r := range byteRunes {
		t[r] = uint16(b) + 1
	}
	return t
}()

// byteLevelEncode maps raw bytes to their byte-level text (GPT-2's bytes_to_unicode).
func byteLevelEncode(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b) * 2)
	for _, c := range b {
		sb.WriteRune(byteRunes[c])
	}
	return sb.String()
}

// byteLevelDecode maps byte-level text back to raw bytes. Characters outside the alphabet (as
// in added tokens such as "<think>" written with other characters) are kept as their UTF-8
// bytes, and so are bytes that are not valid UTF-8.
func byteLevelDecode(piece string) []byte {
	out := make([]byte, 0, len(piece))
	for i := 0; i < len(piece); {
		r, n := utf8.DecodeRuneInString(piece[i:])
		if r < rune(len(runeBytes)) && runeBytes[r] != 0 {
			out = append(out, byte(runeBytes[r]-1))
		} else {
			out = append(out, piece[i:i+n]...) // kept as is, invalid UTF-8 included
		}
		i += n
	}
	return out
}
