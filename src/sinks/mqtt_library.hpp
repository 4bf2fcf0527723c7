// libmosquitto's headers, wherever this version keeps them: 2.0 (Debian 12
// and 13) has <mosquitto.h> and, beside it, <mqtt_protocol.h> for the MQTT 5
// property and reason codes; 2.1 (sid) moved the latter to
// <mosquitto/mqtt_protocol.h>, which <mosquitto.h> includes, and left a
// <mqtt_protocol.h> that warns. Only the mqtt_* files of the MQTT sink and
// its unit tests include this.
#pragma once

#include <mosquitto.h>
#if !__has_include(<mosquitto/mqtt_protocol.h>)
#include <mqtt_protocol.h>
#endif
