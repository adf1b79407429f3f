package protoconv

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/policy"
)

// FieldJSON is StrictJSON for services whose every call passes an
// interceptor that calls DecodeError (the control plane's): a request
// whose JSON does not decode is not refused by the codec, with a message
// naming no field ("proto: (line 1:215): invalid google.protobuf.Duration
// value"), but left empty and marked with the field that failed, so that
// the call is refused after authentication with a field error a form can
// show next to its input.
func FieldJSON() connect.HandlerOption {
	return connect.WithHandlerOptions(connect.WithCodec(fieldJSON{strictJSON{"json"}}), connect.WithCodec(fieldJSON{strictJSON{"json; charset=utf-8"}}))
}

type fieldJSON struct{ strictJSON }

func (c fieldJSON) Unmarshal(b []byte, m any) error {
	err := c.strictJSON.Unmarshal(b, m)
	pm, ok := m.(proto.Message)
	if err == nil || !ok || len(b) == 0 {
		return err
	}
	field, desc := fieldOf(b, err)
	proto.Reset(pm)
	mark := protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.BytesType)
	pm.ProtoReflect().SetUnknown(protowire.AppendBytes(mark, []byte(decodeMark+field+"\x00"+desc)))
	return nil
}

const decodeMark = "sluice-json\x00"

// DecodeError returns the field error of a request FieldJSON could not
// decode, nil for any other.
func DecodeError(m proto.Message) *policy.Error {
	u := m.ProtoReflect().GetUnknown()
	num, typ, n := protowire.ConsumeTag(u)
	if n < 0 || num != protowire.MaxValidNumber || typ != protowire.BytesType {
		return nil
	}
	v, k := protowire.ConsumeBytes(u[n:])
	if k < 0 || !bytes.HasPrefix(v, []byte(decodeMark)) {
		return nil
	}
	field, desc, _ := strings.Cut(string(v[len(decodeMark):]), "\x00")
	return &policy.Error{Code: policy.CodeInvalid, Message: "invalid request", Fields: []policy.FieldError{{Field: field, Description: desc}}}
}

// protojsonAt reads the position protojson's errors give: "(line L:C)".
var protojsonAt = regexp.MustCompile(`\(line (\d+):(\d+)\): `)

// fieldOf names the field of body that err, protojson's, is about, by the
// position the error gives, and says what is wrong in words of its own.
// The field is the path of object keys to the value at the position, in
// snake case, without the request's wrapper of its resource ("rule",
// "override", …) or a rule's "params": "window", as the domain's
// validation names it.
func fieldOf(body []byte, err error) (field, desc string) {
	msg := err.Error()
	desc = msg
	loc := protojsonAt.FindStringSubmatchIndex(msg)
	if loc == nil {
		return "", strings.TrimPrefix(desc, "proto: ")
	}
	desc = msg[loc[1]:]
	if strings.Contains(desc, "google.protobuf.Duration") {
		desc = `must be a duration such as "90s" or "3600s"`
	}
	line, _ := strconv.Atoi(msg[loc[2]:loc[3]])
	col, _ := strconv.Atoi(msg[loc[4]:loc[5]])
	// An unknown field's position is its key's, within the object the
	// path leads to.
	unknown := ""
	if name, ok := strings.CutPrefix(desc, `unknown field "`); ok {
		unknown = snake(strings.TrimSuffix(name, `"`))
	}
	return pathAt(body, offsetOf(body, line, col), unknown), desc
}

// offsetOf is the byte offset of line and column (1-based, in runes).
func offsetOf(b []byte, line, col int) int {
	i := 0
	for l := 1; l < line && i < len(b); i++ {
		if b[i] == '\n' {
			l++
		}
	}
	for c := 1; c < col && i < len(b); c++ {
		_, size := utf8.DecodeRune(b[i:])
		i += size
	}
	return i
}

// pathAt returns the path of keys to the value of body at or after
// offset: the key of the last object member whose value starts before it
// (then child, when not empty: an unknown field's name).
func pathAt(body []byte, offset int, child string) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	type level struct {
		key    string
		object bool
		inKey  bool // the next string token of an object is a key
	}
	var stack []level
	var last string
	path := func() string {
		var parts []string
		for _, l := range stack {
			if l.key != "" {
				parts = append(parts, l.key)
			}
		}
		return strings.Join(parts, ".")
	}
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err == io.EOF || err != nil {
			break
		}
		if int(start) >= offset && last != "" {
			break
		}
		if len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].inKey {
			if k, ok := tok.(string); ok {
				stack[len(stack)-1].key = snake(k)
				stack[len(stack)-1].inKey = false
				last = path()
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, level{object: true, inKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, level{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].inKey = true
		}
	}
	if child != "" {
		last = strings.TrimPrefix(path()+"."+child, ".")
	}
	parts := strings.Split(last, ".")
	switch parts[0] {
	case "rule", "override", "tenant", "tier", "key":
		parts = parts[1:]
	}
	if len(parts) > 1 && parts[0] == "params" {
		parts = parts[1:]
	}
	return strings.Join(parts, ".")
}

// snake is a JSON name in snake case: maxDelay is max_delay.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
