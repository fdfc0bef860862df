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
	for (int i = 0; i < ZD_MAX_DEVICES && devices[i]; i++)
		if (strcmp(devices[i]->name, name) == 0)
			return devices[i];
	return NULL;
}
