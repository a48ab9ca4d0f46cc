/*
 * yamltree.c: turns one YAML document (libyaml events) into a jansson
 * tree plus a side table of source marks, so that the git policy file is
 * checked by the same validators as the API JSON and errors still name
 * file:line:col. Run by the worker (policy files), by config.c at
 * start (the configuration file) and by the CLI. Must never
 * expand aliases (billion laughs) or accept duplicate keys.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "policy/yamltree.h"

/* One node's position, found again through its parent and key/index. */
struct yamltree_entry {
	const json_t *parent; /* NULL for the root */
	char *key;            /* member name, or NULL for an array element */
	size_t index;         /* array index */
	const json_t *node;
	unsigned line, col;   /* the value */
	unsigned kline, kcol; /* its key */
};

struct yamltree_marks {
	struct yamltree_entry *e;
	size_t n, cap;
};

struct yamltree_frame {
	json_t *node; /* object or array */
	char *key;    /* pending key of an object, owned */
	unsigned kline, kcol;
};

static int
yamltree_fail(struct yamltree_error *err, const yaml_mark_t *mk, const char *msg)
{
	err->line = (unsigned)mk->line + 1;
	err->col = (unsigned)mk->column + 1;
	snprintf(err->msg, sizeof(err->msg), "%s", msg);
	return -1;
}

static int
yamltree_record(struct yamltree_marks *m, const json_t *parent, const char *key, size_t index,
    const json_t *node, const yaml_mark_t *mk, unsigned kline, unsigned kcol)
{
	if (m->n == m->cap) {
		size_t ncap = m->cap ? m->cap * 2 : 64;
		struct yamltree_entry *ne = realloc(m->e, ncap * sizeof(*ne));
		if (ne == NULL)
			return -1;
		m->e = ne;
		m->cap = ncap;
	}
	struct yamltree_entry *e = &m->e[m->n];
	e->parent = parent;
	e->key = NULL;
	if (key != NULL && (e->key = strdup(key)) == NULL)
		return -1;
	e->index = index;
	e->node = node;
	e->line = (unsigned)mk->line + 1;
	e->col = (unsigned)mk->column + 1;
	e->kline = kline;
	e->kcol = kcol;
	m->n++;
	return 0;
}

/* Plain scalars get YAML 1.2 core typing; quoted ones stay strings. */
static json_t *
yamltree_scalar(const yaml_event_t *ev)
{
	const char *v = (const char *)ev->data.scalar.value;
	size_t len = ev->data.scalar.length;

	if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || strlen(v) != len)
		return json_stringn(v, len);
	if (len == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
	    strcmp(v, "NULL") == 0)
		return json_null();
	if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 || strcmp(v, "TRUE") == 0)
		return json_true();
	if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0 || strcmp(v, "FALSE") == 0)
		return json_false();
	size_t i = (v[0] == '-' || v[0] == '+') ? 1 : 0;
	if (i < len && strspn(v + i, "0123456789") == len - i && len - i <= 18) {
		errno = 0;
		long long n = strtoll(v, NULL, 10);
		if (errno == 0)
			return json_integer(n);
	}
	return json_stringn(v, len);
}

/* Attach node to the frame on top; a node in key position must be a string. */
static int
yamltree_attach(struct yamltree_frame *top, struct yamltree_marks *m, json_t *node,
    const yaml_event_t *ev, struct yamltree_error *err)
{
	if (json_is_object(top->node)) {
		if (top->key == NULL) {
			/* A key is only a name: the node itself is dropped. */
			json_decref(node);
			if (ev->type != YAML_SCALAR_EVENT)
				return yamltree_fail(
				    err, &ev->start_mark, "mapping keys must be scalars");
			if (strlen((const char *)ev->data.scalar.value) != ev->data.scalar.length)
				return yamltree_fail(err, &ev->start_mark, "NUL byte in a key");
			top->key = strdup((const char *)ev->data.scalar.value);
			if (top->key == NULL)
				return yamltree_fail(err, &ev->start_mark, "out of memory");
			top->kline = (unsigned)ev->start_mark.line + 1;
			top->kcol = (unsigned)ev->start_mark.column + 1;
			if (json_object_get(top->node, top->key) != NULL) {
				err->line = top->kline;
				err->col = top->kcol;
				snprintf(err->msg, sizeof(err->msg), "duplicate key");
				return -1;
			}
			return 0;
		}
		if (yamltree_record(m, top->node, top->key, 0, node, &ev->start_mark, top->kline,
		        top->kcol) != 0 ||
		    json_object_set_new(top->node, top->key, node) != 0)
			return yamltree_fail(err, &ev->start_mark, "out of memory");
		free(top->key);
		top->key = NULL;
		return 0;
	}
	size_t idx = json_array_size(top->node);
	unsigned l = (unsigned)ev->start_mark.line + 1, c = (unsigned)ev->start_mark.column + 1;
	if (yamltree_record(m, top->node, NULL, idx, node, &ev->start_mark, l, c) != 0 ||
	    json_array_append_new(top->node, node) != 0)
		return yamltree_fail(err, &ev->start_mark, "out of memory");
	return 0;
}

/* Parse one document; see yamltree.h. */
json_t *
yamltree_parse(
    const uint8_t *buf, size_t len, struct yamltree_marks **marksp, struct yamltree_error *err)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	struct yamltree_frame stack[YAMLTREE_MAX_DEPTH + 1];
	size_t depth = 0, nodes = 0;
	json_t *root = NULL;
	struct yamltree_marks *m;
	bool done = false, failed = false, doc_seen = false;

	memset(err, 0, sizeof(*err));
	*marksp = NULL;
	if (len > YAMLTREE_MAX_BYTES) {
		err->line = 1;
		err->col = 1;
		snprintf(
		    err->msg, sizeof(err->msg), "file larger than %u bytes", YAMLTREE_MAX_BYTES);
		return NULL;
	}
	if ((m = calloc(1, sizeof(*m))) == NULL)
		return NULL;
	if (!yaml_parser_initialize(&parser)) {
		free(m);
		return NULL;
	}
	yaml_parser_set_input_string(&parser, buf, len);
	while (!done && !failed) {
		if (!yaml_parser_parse(&parser, &ev)) {
			err->line = (unsigned)parser.problem_mark.line + 1;
			err->col = (unsigned)parser.problem_mark.column + 1;
			snprintf(err->msg, sizeof(err->msg), "YAML syntax: %s",
			    parser.problem ? parser.problem : "error");
			failed = true;
			break;
		}
		json_t *node = NULL;
		bool push = false;
		const char *anchor = NULL, *tag = NULL;
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (doc_seen) {
				failed = yamltree_fail(err, &ev.start_mark,
				             "only one YAML document is allowed") != 0;
			}
			doc_seen = true;
			break;
		case YAML_ALIAS_EVENT:
			failed =
			    yamltree_fail(err, &ev.start_mark, "YAML aliases are not allowed") != 0;
			break;
		case YAML_SCALAR_EVENT:
			anchor = (const char *)ev.data.scalar.anchor;
			tag = (const char *)ev.data.scalar.tag;
			node = yamltree_scalar(&ev);
			break;
		case YAML_MAPPING_START_EVENT:
			anchor = (const char *)ev.data.mapping_start.anchor;
			tag = (const char *)ev.data.mapping_start.tag;
			node = json_object();
			push = true;
			break;
		case YAML_SEQUENCE_START_EVENT:
			anchor = (const char *)ev.data.sequence_start.anchor;
			tag = (const char *)ev.data.sequence_start.tag;
			node = json_array();
			push = true;
			break;
		case YAML_MAPPING_END_EVENT:
		case YAML_SEQUENCE_END_EVENT:
			depth--;
			free(stack[depth].key);
			break;
		default:
			break;
		}
		if (!failed && (anchor != NULL || tag != NULL)) {
			failed = yamltree_fail(err, &ev.start_mark,
			             anchor ? "YAML anchors are not allowed"
			                    : "YAML tags are not allowed") != 0;
		}
		if (!failed && node == NULL && (ev.type == YAML_SCALAR_EVENT || push))
			failed = yamltree_fail(err, &ev.start_mark, "out of memory") != 0;
		if (!failed && node != NULL && ++nodes > YAMLTREE_MAX_NODES)
			failed = yamltree_fail(err, &ev.start_mark, "too many YAML nodes") != 0;
		if (failed)
			json_decref(node); /* never attached */
		if (!failed && node != NULL) {
			if (depth == 0) {
				root = node;
				json_incref(root);
				if (yamltree_record(m, NULL, NULL, 0, node, &ev.start_mark, 0, 0) !=
				    0)
					failed = true;
				json_decref(node);
			} else {
				bool is_key = json_is_object(stack[depth - 1].node) &&
				              stack[depth - 1].key == NULL;
				json_incref(node);
				if (yamltree_attach(&stack[depth - 1], m, node, &ev, err) != 0)
					failed = true;
				json_decref(node);
				if (is_key) {
					yaml_event_delete(&ev);
					continue;
				}
			}
			if (!failed && push) {
				if (depth >= YAMLTREE_MAX_DEPTH) {
					failed = yamltree_fail(err, &ev.start_mark,
					             "YAML nesting too deep") != 0;
				} else {
					stack[depth].node = node;
					stack[depth].key = NULL;
					depth++;
				}
			}
		}
		yaml_event_delete(&ev);
	}
	if (failed) {
		for (size_t i = 0; i < depth; i++)
			free(stack[i].key);
		json_decref(root);
		yaml_parser_delete(&parser);
		yamltree_marks_free(m);
		return NULL;
	}
	yaml_parser_delete(&parser);
	if (root == NULL)
		root = json_null();
	*marksp = m;
	return root;
}

/* Position of a node; see yamltree.h. */
int
yamltree_mark(const struct yamltree_marks *m, const json_t *parent, const char *key, size_t index,
    int want_key, unsigned *line, unsigned *col)
{
	if (m == NULL)
		return -1;
	for (size_t i = 0; i < m->n; i++) {
		const struct yamltree_entry *e = &m->e[i];
		if (e->parent != parent)
			continue;
		if (parent != NULL && (key != NULL ? (e->key == NULL || strcmp(e->key, key) != 0)
		                                   : (e->key != NULL || e->index != index)))
			continue;
		*line = want_key ? e->kline : e->line;
		*col = want_key ? e->kcol : e->col;
		return 0;
	}
	return -1;
}

/* Position of a container node; see yamltree.h. */
int
yamltree_mark_node(
    const struct yamltree_marks *m, const json_t *node, unsigned *line, unsigned *col)
{
	if (m == NULL || node == NULL)
		return -1;
	for (size_t i = 0; i < m->n; i++) {
		if (m->e[i].node == node) {
			*line = m->e[i].line;
			*col = m->e[i].col;
			return 0;
		}
	}
	return -1;
}

/* Free the marks; see yamltree.h. */
void
yamltree_marks_free(struct yamltree_marks *m)
{
	if (m == NULL)
		return;
	for (size_t i = 0; i < m->n; i++)
		free(m->e[i].key);
	free(m->e);
	free(m);
}
