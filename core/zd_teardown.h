/* Abrupt teardown of everything an IA still owns. */
#ifndef ZD_TEARDOWN_H
#define ZD_TEARDOWN_H

struct zd_ia;

/* Frees every child of @ia, users before the objects they use. */
void zd_teardown_children(struct zd_ia *ia);

#endif
