/* Internals of the TensorFlow GraphDef importer and exporter: the protobuf text-format parser
 * (tf-text.c) shared by the .pbtxt path, and helpers between tf.c and ops-tf.c. */
#ifndef PLACESIM_TF_PRIVATE_H
#define PLACESIM_TF_PRIVATE_H

#include <protobuf-c/protobuf-c.h>

#include "graph/graph-private.h"
#include "graph/ops-private.h"

/* Deepest message nesting the text parser accepts (GraphDef nests about six levels). */
#define PSIM_PBTXT_MAX_DEPTH 64

/* Parses protobuf text format into a new message of type `desc`, driven by protobuf-c's
 * descriptors, so any generated message type works. Unknown fields are skipped. Returns a
 * message to free with protobuf_c_message_free_unpacked(m, NULL), or NULL with an error naming
 * `path`, the line and what was expected. `data` needs no terminating NUL. */
ProtobufCMessage *psim__pbtxt_parse(const ProtobufCMessageDescriptor *desc, const char *path,
                                    const char *data, gsize len, GError **error);

/* Appends `len` bytes as a quoted text-format string literal (C escapes, octal for others). */
void psim__pbtxt_quote(GString *s, const void *data, gsize len);

/* TF DataType numbers to and from IR dtypes (reference types map to their value type;
 * unsupported ones to UNDEFINED / DT_INVALID). */
PsimDType psim__tf_dtype_to_psim(int tf_type);
int psim__tf_dtype_from_psim(PsimDType t);

/* The attr the exporter adds to a node whose IR op has no TF meaning of that name (ONNX's Conv,
 * Gemm, MaxPool...): its value is the IR op, which the importer then keeps instead of reading
 * the name as a TF op ("TfConv"). TF ignores attrs whose names begin with '_'. */
#define PSIM_TF_IR_OP_ATTR "_placesim_op"
/* Beside it, the node's output count where the op's definition would give another (an ONNX
 * Dropout that lists its mask). */
#define PSIM_TF_IR_OUTPUTS_ATTR "_placesim_outputs"

/* Whether a TF node of op `op`, not converted by the importer, keeps `op` as its IR op (FALSE:
 * the name means something else in TF, and the importer prefixes it "Tf"). */
gboolean psim__tf_op_keeps_name(const char *op);

#endif
