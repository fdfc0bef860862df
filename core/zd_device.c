/* The table of devices compiled into the library (see zd_device.h). */
#include <string.h>

#include "core/zd_device.h"

#define ZD_MAX_DEVICES 8

static const struct zd_device_ops *devices[ZD_MAX_DEVICES];

void zd_device_register(const struct zd_device_ops *ops)
{
	for (int i = 0; i < ZD_MAX_DEVICES; i++) {
		if (!devices[i]) {
			devices[i] = ops;
			return;
		}
	}
}

const struct zd_device_ops *zd_device_find(const char *name)
{
	for (int i = 0; i < ZD_MAX_DEVICES && devices[i]; i++) {
		const char *d = devices[i]->name;
		size_t len = strlen(d);

		if (strcmp(d, name) == 0)
			return devices[i];
		/* "prefix*": hardware devices named by index (mlx5_0, ...). */
		if (len > 1 && d[len - 1] == '*' && strncmp(d, name, len - 1) == 0 &&
		    name[len - 1] != '\0')
			return devices[i];
	}
	return NULL;
}
