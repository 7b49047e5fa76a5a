package hfconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// TokenIDs is a token id field that Hugging Face files write as null, a single integer or a
// list of integers (eos_token_id often lists several). Null decodes to an empty list.
type TokenIDs []int

// UnmarshalJSON accepts null, an integer or a list of integers.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*t = nil
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return fmt.Errorf("token id list: %w", err)
		}
		*t = ids
		return nil
	}
	var id int
	if err := json.Unmarshal(b, &id); err != nil {
		return fmt.Errorf("token id: %w", err)
	}
	*t = TokenIDs{id}
	return nil
}

// MarshalJSON writes null for none, a bare integer for one id and a list for several, as
// transformers writes them.
func (t TokenIDs) MarshalJSON() ([]byte, error) {
	switch len(t) {
	case 0:
		return []byte("null"), nil
	case 1:
		return json.Marshal(t[0])
	}
	return json.Marshal([]int(t))
}

// First returns the first id, or -1 when there is none.
func (t TokenIDs) First() int {
	if len(t) == 0 {
		return -1
	}
	return t[0]
}
