package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// This file holds the checks of a request's lists and texts on its raw JSON, before the
// body is decoded into the request type (rawjson.go holds the scans).

// prechecker is a request type whose lists and texts are bounded before they are decoded:
// decodeJSON hands precheck the body's top-level fields, raw, before decoding the body into
// the type, so that a list of a million elements is refused without making a million
// values. It is a fast path (the checks after decoding stay, the authority): it looks at the
// fields under every spelling encoding/json takes for a name (in any case, as "Stop").
type prechecker interface {
	precheck(fields map[string]json.RawMessage) *APIError
}

// precheck bounds the stop strings (and, for completions, the prompts; for chat, the
// messages) of a request whose limits are set.
func (c *commonRequest) precheck(fields map[string]json.RawMessage) *APIError {
	if c.limits == nil {
		return nil
	}
	return eachField(fields, "stop", func(raw json.RawMessage) *APIError {
		if n, ok := listLen(raw); ok && n > c.limits.MaxStopStrings {
			return c.limits.tooManyStops(n)
		}
		return nil
	})
}

// eachField calls check with every field of fields whose name encoding/json would decode
// into the struct field of JSON name (the name itself, or the name in another case), and
// returns the first error. (A body that spells a field twice is checked on both, where
// encoding/json keeps the last.)
func eachField(fields map[string]json.RawMessage, name string, check func(json.RawMessage) *APIError) *APIError {
	for k, raw := range fields {
		if k == name || strings.EqualFold(k, name) {
			if apiErr := check(raw); apiErr != nil {
				return apiErr
			}
		}
	}
	return nil
}

func (c *completionRequest) precheck(fields map[string]json.RawMessage) *APIError {
	apiErr := eachField(fields, "prompt", func(raw json.RawMessage) *APIError {
		if n, ok := listLen(raw); ok && n > MaxPrompts && isTextList(raw) {
			return tooManyPrompts(n)
		}
		if c.limits != nil {
			return c.limits.checkPromptTexts(raw)
		}
		return nil
	})
	if apiErr != nil {
		return apiErr
	}
	return c.commonRequest.precheck(fields)
}

func (c *chatRequest) precheck(fields map[string]json.RawMessage) *APIError {
	if c.limits != nil {
		apiErr := eachField(fields, "messages", func(raw json.RawMessage) *APIError {
			if apiErr := c.limits.checkMessageList(raw); apiErr != nil {
				return apiErr
			}
			return c.limits.checkPromptBytes("messages", "the text of the messages", messagesTextLen(raw))
		})
		if apiErr != nil {
			return apiErr
		}
	}
	return c.commonRequest.precheck(fields)
}

// messagesTextLen is the length of the contents of a raw list of messages: each message's
// content string, or the texts of its content parts (a lower bound of what renderChat
// counts, which adds the parts' separators, reasoning and tool calls).
func messagesTextLen(raw json.RawMessage) int {
	total := 0
	elements(raw, func(msg []byte) bool {
		content := 0 // of the last content member, the one encoding/json keeps
		members(msg, func(key, value []byte) bool {
			if !isKey(key, "content") {
				return true
			}
			if n, ok := stringLen(value); ok {
				content = n
				return true
			}
			content = 0
			elements(value, func(part []byte) bool {
				text := 0
				members(part, func(key, value []byte) bool {
					if n, ok := stringLen(value); ok && isKey(key, "text") {
						text = n
					}
					return true
				})
				content += text
				return true
			})
			return true
		})
		total += content
		return true
	})
	return total
}

// isKey reports whether the raw (quoted) key of an object member names the field of JSON
// name, as encoding/json matches it (in any case).
func isKey(key []byte, name string) bool {
	if len(key) < 2 {
		return false
	}
	if bytes.IndexByte(key, '\\') < 0 {
		return bytes.EqualFold(key[1:len(key)-1], []byte(name))
	}
	var k string
	return json.Unmarshal(key, &k) == nil && strings.EqualFold(k, name)
}

func (c *tokenizeRequest) precheck(fields map[string]json.RawMessage) *APIError {
	if c.limits == nil {
		return nil
	}
	if apiErr := eachField(fields, "messages", c.limits.checkMessageList); apiErr != nil {
		return apiErr
	}
	return eachField(fields, "prompt", c.limits.checkPromptTexts)
}

// checkMessageList refuses a raw list of more than MaxChatMessages messages.
func (l *Limits) checkMessageList(raw json.RawMessage) *APIError {
	if n, ok := listLen(raw); ok {
		return l.checkMessages(n)
	}
	return nil
}

// checkPromptTexts refuses a text prompt, or a prompt of a list, over MaxPromptBytes
// (measured on the raw JSON, before the text is decoded).
func (l *Limits) checkPromptTexts(raw json.RawMessage) *APIError {
	if n, ok := stringLen(raw); ok {
		return l.checkPromptBytes("prompt", "the prompt", n)
	}
	var apiErr *APIError
	i := 0
	elements(raw, func(elem []byte) bool {
		if n, ok := stringLen(elem); ok {
			apiErr = l.checkPromptBytes("prompt", fmt.Sprintf("prompt %d", i), n)
		}
		i++
		return apiErr == nil
	})
	return apiErr
}

// isTextList reports whether a prompt list holds strings or lists (prompts), rather than
// token ids (one prompt).
func isTextList(raw json.RawMessage) bool {
	i := skipSpace(raw, 0)
	j := skipSpace(raw, i+1)
	return j < len(raw) && (raw[j] == '"' || raw[j] == '[')
}

// tooManyPrompts is the 400 for more than MaxPrompts prompts.
func tooManyPrompts(n int) *APIError {
	return badRequest("prompt", "%d prompts: at most %d per request", n, MaxPrompts)
}
