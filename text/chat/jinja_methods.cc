// Global functions (namespace, range, dict, raise_exception) and the methods
// of str, dict and the loop object.
#include <cmath>

#include "text/chat/jinja_builtins.h"
#include "text/chat/jinja_str_ops.h"
#include "text/chat/unicode_util.h"

namespace lg::text::jinja {
namespace {

Status arity(std::string_view fn, const CallArgs& args, size_t min, size_t max) {
  if (!args.keyword.empty()) return invalidArgument(std::string(fn) + "() takes no keyword arguments");
  if (args.positional.size() < min || args.positional.size() > max) {
    return invalidArgument(std::string(fn) + "() takes " + (min == max ? "" : "at most ") + std::to_string(max) +
                           " arguments (" + std::to_string(args.positional.size()) + " given)");
  }
  return Status::ok();
}

Result<std::optional<std::string_view>> optionalStr(const CallArgs& args, size_t i, std::string_view fn) {
  if (i >= args.positional.size() || args.positional[i].isNone()) return std::optional<std::string_view>();
  if (!args.positional[i].isString()) {
    return invalidArgument(std::string(fn) + "() argument must be str or None, not " +
                           std::string(args.positional[i].typeName()));
  }
  return std::optional<std::string_view>(args.positional[i].str());
}

Result<int64_t> intArg(const Value& v, std::string_view fn) {
  if (v.kind() == ValueKind::kInt || v.kind() == ValueKind::kBool) return v.intValue();
  return invalidArgument(std::string(fn) + "(): '" + std::string(v.typeName()) +
                         "' object cannot be interpreted as an integer");
}

Result<bool> affix(const Value& self, const CallArgs& args, bool prefix) {
  const char* fn = prefix ? "startswith" : "endswith";
  LG_RETURN_IF_ERROR(arity(fn, args, 1, 1));
  const Value& arg = args.positional[0];
  std::vector<Value> candidates;
  if (arg.isString()) {
    candidates.push_back(arg);
  } else if (arg.isTuple()) {
    for (size_t i = 0; i < listSize(arg); ++i) candidates.push_back(listAt(arg, i));
  } else {
    return invalidArgument(std::string(fn) + " first arg must be str or a tuple of str, not " +
                           std::string(arg.typeName()));
  }
  const std::string_view s = self.str();
  for (const Value& c : candidates) {
    if (!c.isString()) return invalidArgument(std::string("tuple for ") + fn + " must only contain str");
    const std::string_view a = c.str();
    if (a.size() <= s.size() && (prefix ? s.substr(0, a.size()) == a : s.substr(s.size() - a.size()) == a)) {
      return true;
    }
  }
  return false;
}

Result<Value> callRange(const CallArgs& args) {
  LG_RETURN_IF_ERROR(arity("range", args, 1, 3));
  int64_t start = 0, stop = 0, step = 1;
  if (args.positional.size() == 1) {
    LG_ASSIGN_OR_RETURN(stop, intArg(args.positional[0], "range"));
  } else {
    LG_ASSIGN_OR_RETURN(start, intArg(args.positional[0], "range"));
    LG_ASSIGN_OR_RETURN(stop, intArg(args.positional[1], "range"));
    if (args.positional.size() == 3) {
      LG_ASSIGN_OR_RETURN(step, intArg(args.positional[2], "range"));
    }
  }
  if (step == 0) return invalidArgument("range() arg 3 must not be zero");
  // Length computed in long double to stay clear of int64 overflow.
  const long double span = static_cast<long double>(stop) - static_cast<long double>(start);
  const long double len = std::ceil(span / static_cast<long double>(step));
  if (len > static_cast<long double>(kMaxRange)) {
    return invalidArgument("range too big, maximum size for range is " + std::to_string(kMaxRange));
  }
  LG_JINJA_RETURN_IF_REFUSED(chargeItems(static_cast<size_t>(std::max<long double>(len, 0))));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(std::max<long double>(len, 0)));
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.push_back(Value::integer(i, true));
  return Value::range(std::move(items), start, stop, step);
}

}  // namespace

Result<Value> callBuiltin(const CallableData& fn, const CallArgs& args) {
  const Value& self = fn.self;
  switch (fn.id) {
    case Builtin::kNamespace: {
      auto ns = std::make_shared<NamespaceData>();
      auto set = [&](std::string name, const Value& v) {
        if (Value* existing = ns->find(name)) {
          *existing = v;
        } else {
          ns->attrs.emplace_back(std::move(name), v);
        }
      };
      if (args.positional.size() > 1) return invalidArgument("namespace() takes at most 1 positional argument");
      if (args.positional.size() == 1) {
        const Value& init = args.positional[0];
        if (!init.isDict()) return invalidArgument("namespace() argument must be a mapping");
        LG_JINJA_RETURN_IF_REFUSED(chargeItems(dictSize(init)));
        dictForEach(init, [&](const Value& k, const Value& v) { set(std::string(k.str()), v); });
      }
      for (const auto& [k, v] : args.keyword) set(k, v);
      return Value::namespaceObject(std::move(ns));
    }
    case Builtin::kDict: {
      if (!args.positional.empty()) return unimplemented("dict() with positional arguments");
      std::vector<std::pair<Value, Value>> items;
      for (const auto& [k, v] : args.keyword) items.emplace_back(Value::string(k, true), v);
      return Value::dict(std::move(items));
    }
    case Builtin::kRange:
      return callRange(args);
    case Builtin::kRaiseException: {
      LG_RETURN_IF_ERROR(arity("raise_exception", args, 1, 1));
      StrBuilder msg;
      LG_RETURN_IF_ERROR(appendPyStr(args.positional[0], msg));
      // The message is template-authored; cap it in case it quotes request data.
      std::string text(msg.finish().str().substr(0, 512));
      return invalidArgument("chat template error: " + text);
    }
    case Builtin::kStrSplit:
    case Builtin::kStrRsplit: {
      const bool right = fn.id == Builtin::kStrRsplit;
      std::optional<Value> sep, maxsplit;
      if (args.positional.size() > 2) return invalidArgument("split() takes at most 2 arguments");
      if (!args.positional.empty()) sep = args.positional[0];
      if (args.positional.size() > 1) maxsplit = args.positional[1];
      for (const auto& [k, v] : args.keyword) {
        if (k == "sep" && !sep) {
          sep = v;
        } else if (k == "maxsplit" && !maxsplit) {
          maxsplit = v;
        } else {
          return invalidArgument("split() got an unexpected keyword argument '" + k + "'");
        }
      }
      std::optional<std::string_view> sep_text;
      if (sep && !sep->isNone()) {
        if (!sep->isString()) return invalidArgument("must be str or None, not " + std::string(sep->typeName()));
        sep_text = sep->str();
      }
      int64_t max = -1;
      if (maxsplit) {
        LG_ASSIGN_OR_RETURN(max, intArg(*maxsplit, "split"));
      }
      return pySplit(self, sep_text, max, right);
    }
    case Builtin::kStrStrip:
    case Builtin::kStrLstrip:
    case Builtin::kStrRstrip: {
      LG_RETURN_IF_ERROR(arity("strip", args, 0, 1));
      LG_ASSIGN_OR_RETURN(auto chars, optionalStr(args, 0, "strip"));
      const StripSide side = fn.id == Builtin::kStrStrip
                                 ? StripSide::kBoth
                                 : (fn.id == Builtin::kStrLstrip ? StripSide::kLeft : StripSide::kRight);
      return pyStrip(self, chars, side);
    }
    case Builtin::kStrStartswith:
    case Builtin::kStrEndswith: {
      LG_ASSIGN_OR_RETURN(bool r, affix(self, args, fn.id == Builtin::kStrStartswith));
      return Value::boolean(r, allBytesTrusted(self));
    }
    case Builtin::kStrReplace: {
      LG_RETURN_IF_ERROR(arity("replace", args, 2, 3));
      if (!args.positional[0].isString() || !args.positional[1].isString()) {
        return invalidArgument("replace() arguments must be str");
      }
      int64_t count = -1;
      if (args.positional.size() == 3) {
        LG_ASSIGN_OR_RETURN(count, intArg(args.positional[2], "replace"));
      }
      return pyReplace(self, args.positional[0], args.positional[1], count);
    }
    case Builtin::kStrLower:
    case Builtin::kStrUpper:
    case Builtin::kStrCapitalize:
      LG_RETURN_IF_ERROR(arity("lower", args, 0, 0));
      return pyCaseMap(self, fn.id == Builtin::kStrLower
                                 ? CaseMap::kLower
                                 : (fn.id == Builtin::kStrUpper ? CaseMap::kUpper : CaseMap::kCapitalize));
    case Builtin::kStrFind:
    case Builtin::kStrCount: {
      LG_RETURN_IF_ERROR(arity(fn.id == Builtin::kStrFind ? "find" : "count", args, 1, 1));
      if (!args.positional[0].isString()) return invalidArgument("must be str, not " + std::string(args.positional[0].typeName()));
      const std::string_view sub = args.positional[0].str();
      chargeBytes(self.str().size());
      return Value::integer(fn.id == Builtin::kStrFind ? pyFind(self.str(), sub) : pyCount(self.str(), sub),
                            allBytesTrusted(self));
    }
    case Builtin::kStrJoin: {
      LG_RETURN_IF_ERROR(arity("join", args, 1, 1));
      LG_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(args.positional[0]));
      StrBuilder out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].isString()) {
          return invalidArgument("sequence item " + std::to_string(i) + ": expected str instance, " +
                                 std::string(items[i].typeName()) + " found");
        }
        if (i > 0) out.appendStr(self);
        out.appendStr(items[i]);
        LG_JINJA_RETURN_IF_REFUSED(budgetOk());
      }
      return out.finish();
    }
    case Builtin::kDictGet: {
      LG_RETURN_IF_ERROR(arity("get", args, 1, 2));
      Value out;
      if (args.positional[0].isString() && dictGet(self, args.positional[0].str(), &out)) return out;
      return args.positional.size() == 2 ? args.positional[1] : Value::none(true);
    }
    case Builtin::kDictItems:
    case Builtin::kDictKeys:
    case Builtin::kDictValues: {
      LG_RETURN_IF_ERROR(arity("items", args, 0, 0));
      LG_JINJA_RETURN_IF_REFUSED(chargeItems((fn.id == Builtin::kDictItems ? 3 : 1) * dictSize(self)));
      std::vector<Value> out;
      dictForEach(self, [&](const Value& k, const Value& v) {
        if (fn.id == Builtin::kDictItems) {
          out.push_back(Value::list({k, v}, true));
        } else {
          out.push_back(fn.id == Builtin::kDictKeys ? k : v);
        }
      });
      return Value::list(std::move(out));
    }
    case Builtin::kLoopCycle: {
      if (args.positional.empty()) return invalidArgument("no items for cycling given");
      return args.positional[self.loopData()->index0 % args.positional.size()];
    }
  }
  return internalError("unknown builtin");
}

}  // namespace lg::text::jinja
