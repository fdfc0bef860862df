/* Filling DAT_IA_ATTR and DAT_PROVIDER_ATTR for dat_ia_query. */
#ifndef ZD_ATTR_H
#define ZD_ATTR_H

#include "core/zd_ia.h"

void zd_ia_fill_attr(const struct zd_ia *ia, DAT_IA_ATTR *attr);
void zd_ia_fill_provider_attr(const struct zd_ia *ia, DAT_PROVIDER_ATTR *attr);

#endif
