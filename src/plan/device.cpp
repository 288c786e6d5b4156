// The planner's device lookups (device.h), delegating to the one table in core/device_table.cpp.
#include "plan/device.h"

namespace baton::plan {

const std::vector<DeviceType>& device_table() { return device_specs(); }

const DeviceType& find_device(const std::string& name) { return find_device_spec(name); }

}  // namespace baton::plan
