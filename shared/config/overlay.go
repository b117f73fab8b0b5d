package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// Overlay returns doc with override merged over it, as a JSON merge patch
// does (RFC 7386): a mapping merges into the mapping at the same path key
// by key, a null removes the key, anything else (a list, a scalar) replaces
// the value. Lists are never merged: an override's tenants are the tenants.
// The result is YAML; comments and anchors of doc are kept where nothing
// replaced them.
func Overlay(doc, override []byte) ([]byte, error) {
	base, err := document(doc)
	if err != nil {
		return nil, Problems{"parse: " + err.Error()}
	}
	over, err := document(override)
	if err != nil {
		return nil, Problems{"overlay: parse: " + err.Error()}
	}
	if over == nil || isNull(over) {
		return doc, nil
	}
	if over.Kind != yaml.MappingNode {
		return nil, Problems{"overlay: must be a mapping of fields"}
	}
	if base == nil || isNull(base) {
		base = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	if base.Kind != yaml.MappingNode {
		return nil, Problems{"(top level): must be a mapping of fields"}
	}
	merge(base, over)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(base); err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	return out.Bytes(), nil
}

// document decodes the one YAML document in b; nil when b is empty.
func document(b []byte) (*yaml.Node, error) {
	var n yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return n.Content[0], nil
	}
	return &n, nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// merge merges mapping over into mapping base (RFC 7386 semantics).
func merge(base, over *yaml.Node) {
	for i := 0; i+1 < len(over.Content); i += 2 {
		k, v := over.Content[i], over.Content[i+1]
		at := -1
		for j := 0; j+1 < len(base.Content); j += 2 {
			if base.Content[j].Kind == yaml.ScalarNode && base.Content[j].Value == k.Value {
				at = j
			}
		}
		switch {
		case isNull(v):
			if at >= 0 {
				base.Content = append(base.Content[:at], base.Content[at+2:]...)
			}
		case at < 0:
			base.Content = append(base.Content, k, v)
		case v.Kind == yaml.MappingNode && base.Content[at+1].Kind == yaml.MappingNode:
			merge(base.Content[at+1], v)
		default:
			base.Content[at+1] = v
		}
	}
}
