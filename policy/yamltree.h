/*
 * YAML to JSON-tree conversion with source marks, so that the policy file
 * and the API JSON are validated by one set of functions.
 */
#ifndef POLICY_YAMLTREE_H
#define POLICY_YAMLTREE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define YAMLTREE_MAX_BYTES (4u << 20) /* bytes of one YAML document */
#define YAMLTREE_MAX_DEPTH 32         /* nesting of mappings/sequences */
#define YAMLTREE_MAX_NODES 1000000    /* nodes of one document */

struct yamltree_marks;

/* Where a YAML parse failed (1-based line and column). */
struct yamltree_error {
	unsigned line;
	unsigned col;
	char msg[160];
};

/*
 * Parse one YAML document into a JSON tree (mappings become objects,
 * sequences arrays; plain scalars true/false/null/integers become JSON
 * values, everything else a string). Aliases, anchors, tags, duplicate
 * keys, non-scalar keys and several documents are errors. Returns an owned
 * tree (json_decref) and owned marks (yamltree_marks_free), or NULL.
 */
json_t *yamltree_parse(const uint8_t *buf, size_t len, struct yamltree_marks **marks,
    struct yamltree_error *err) __attribute__((warn_unused_result));

/*
 * Look up the 1-based position of a value: the root (parent NULL), the
 * member key of object parent, or element index of array parent (key
 * NULL). With want_key, the position of the member's key. 0 or -1.
 */
int yamltree_mark(const struct yamltree_marks *m, const json_t *parent, const char *key,
    size_t index, int want_key, unsigned *line, unsigned *col);

/*
 * Position of a node by identity; meaningful for mappings, sequences,
 * strings and numbers (true/false/null are shared singletons). 0 or -1.
 */
int yamltree_mark_node(
    const struct yamltree_marks *m, const json_t *node, unsigned *line, unsigned *col);

/* Free marks (accepts NULL). */
void yamltree_marks_free(struct yamltree_marks *m);

#endif
