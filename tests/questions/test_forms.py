"""
Tests for L{mcpx.questions.forms}.
"""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.questions.forms import FormField, check_content, coerce, fields

#: One field of each kind the 2025-11-25 requestedSchema allows.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "minLength": 2, "maxLength": 10},
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "born": {"type": "string", "format": "date"},
        "when": {"type": "string", "format": "date-time"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150, "default": 30},
        "score": {"type": "number", "minimum": 0.5},
        "agree": {"type": "boolean", "default": False},
        "colour": {"type": "string", "enum": ["red", "green"]},
        "size": {
            "type": "string",
            "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}],
        },
        "legacy": {"type": "string", "enum": ["a", "b"], "enumNames": ["Apple", "Banana"]},
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["x", "y", "z"]},
            "minItems": 1,
            "maxItems": 2,
        },
        "pets": {
            "type": "array",
            "items": {
                "anyOf": [{"const": "cat", "title": "Cat"}, {"const": "dog", "title": "Dog"}]
            },
        },
    },
    "required": ["name", "age"],
}


def form_field(name: str) -> FormField:
    return next(field for field in fields(SCHEMA) if field.name == name)


class CheckContentTests(SynchronousTestCase):
    def check(self, content: dict[str, Any]) -> str | None:
        return check_content(SCHEMA, {"name": "Ada", "age": 36, **content})

    def test_fitting_answer(self) -> None:
        """An answer that sets every kind of field within its rules is accepted."""
        self.assertIsNone(
            self.check(
                {
                    "email": "ada@example.org",
                    "site": "https://example.org/x",
                    "born": "1815-12-10",
                    "when": "2025-01-31T09:30:00Z",
                    "score": 0.5,
                    "agree": True,
                    "colour": "red",
                    "size": "l",
                    "legacy": "b",
                    "tags": ["x", "z"],
                    "pets": ["dog"],
                }
            )
        )

    def test_only_required(self) -> None:
        """Optional fields may be left out."""
        self.assertIsNone(self.check({}))

    def test_maximum(self) -> None:
        """A number above its maximum is refused with a reason naming the field and limit."""
        self.assertEqual(self.check({"age": 200}), "age: 200 is more than the maximum 150")

    def test_minimum(self) -> None:
        """A number below its minimum is refused, naming the minimum."""
        self.assertEqual(self.check({"score": 0.1}), "score: 0.1 is less than the minimum 0.5")

    def test_integer_type(self) -> None:
        """A fractional or textual value for an integer field is refused."""
        self.assertEqual(self.check({"age": 3.5}), "age: 3.5 is not a whole number")
        self.assertEqual(self.check({"age": "3"}), 'age: "3" is not a whole number')

    def test_boolean_is_not_a_number(self) -> None:
        """true is not accepted as a number, nor 1 as a boolean."""
        self.assertEqual(self.check({"score": True}), "score: true is not a number")
        self.assertEqual(self.check({"agree": 1}), "agree: 1 is not true or false")

    def test_lengths(self) -> None:
        """Text shorter or longer than its bounds is refused with the bound."""
        self.assertEqual(self.check({"name": "A"}), 'name: "A" is shorter than 2 characters')
        self.assertEqual(
            self.check({"name": "A" * 11}), f'name: "{"A" * 11}" is longer than 10 characters'
        )

    def test_formats(self) -> None:
        """Each of the four formats refuses text that is not of that format."""
        self.assertEqual(
            self.check({"email": "ada.example.org"}),
            'email: "ada.example.org" is not a valid email address',
        )
        self.assertEqual(self.check({"site": "not a uri"}), 'site: "not a uri" is not a valid URI')
        self.assertEqual(
            self.check({"born": "1815-13-10"}),
            'born: "1815-13-10" is not a valid date (YYYY-MM-DD)',
        )
        self.assertIn("is not a valid date-time", self.check({"when": "2025-01-31"}) or "")
        self.assertIn("is not a valid date-time", self.check({"when": "2025-01-31T09:30:00"}) or "")

    def test_date_time_offsets(self) -> None:
        """Date-times with a numeric offset or a lower-case z are accepted."""
        self.assertIsNone(self.check({"when": "2025-01-31T09:30:00.25+02:00"}))
        self.assertIsNone(self.check({"when": "2025-01-31t09:30:00z"}))

    def test_single_choice(self) -> None:
        """A value outside a single choice is refused, listing the choices."""
        self.assertEqual(
            self.check({"colour": "blue"}), 'colour: "blue" is not one of "red", "green"'
        )
        self.assertEqual(self.check({"size": "Small"}), 'size: "Small" is not one of "s", "l"')
        self.assertEqual(self.check({"legacy": "Apple"}), 'legacy: "Apple" is not one of "a", "b"')

    def test_multiple_choice(self) -> None:
        """A multiple choice refuses unknown values and too few or too many picks."""
        self.assertEqual(self.check({"tags": ["x", "w"]}), 'tags: "w" is not one of "x", "y", "z"')
        self.assertEqual(self.check({"tags": []}), "tags: choose at least 1")
        self.assertEqual(self.check({"tags": ["x", "y", "z"]}), "tags: choose at most 2")
        self.assertEqual(self.check({"pets": ["cow"]}), 'pets: "cow" is not one of "cat", "dog"')
        self.assertEqual(self.check({"tags": "x"}), 'tags: "x" is not a list')

    def test_required(self) -> None:
        """A missing required field is refused, naming it."""
        self.assertEqual(check_content(SCHEMA, {"name": "Ada"}), "age: a value is required")

    def test_unknown_field(self) -> None:
        """A field the form does not define is refused (most likely a typo)."""
        self.assertEqual(self.check({"nmae": "x"}), "nmae: not a field of this form")

    def test_not_an_object(self) -> None:
        """Content that is not an object is refused."""
        self.assertEqual(
            check_content(SCHEMA, ["Ada"]), "the content is not an object of field values"
        )

    def test_invalid_schemas(self) -> None:
        """A schema outside the elicitation subset is reported as invalid, saying why."""
        cases: list[tuple[Any, str]] = [
            ({"type": "array"}, 'the form is not an object schema ("type": "object")'),
            ({"type": "object"}, "the form has no properties object"),
            (
                {"type": "object", "properties": {"x": {"type": "object"}}},
                'x: type "object" is not allowed in a form',
            ),
            (
                {"type": "object", "properties": {"x": {"type": "string", "enum": [1, 2]}}},
                "x: enum is not a list of strings",
            ),
            (
                {"type": "object", "properties": {"x": {"type": "array", "items": {}}}},
                "x: a list field needs items with enum or anyOf choices",
            ),
            (
                {"type": "object", "properties": {"x": {"type": "string", "minLength": -1}}},
                "x: minLength is not a whole number of at least 0",
            ),
            (
                {"type": "object", "properties": {"x": {"type": "number", "maximum": "9"}}},
                "x: maximum is not a number",
            ),
            (
                {"type": "object", "properties": {}, "required": ["y"]},
                "y: required, but the form does not define it",
            ),
        ]
        for schema, reason in cases:
            found = check_content(schema, {})
            self.assertIsNotNone(found, schema)
            assert found is not None
            self.assertTrue(found.startswith("the requested schema is invalid: "), found)
            self.assertIn(reason, found)

    def test_unknown_format_not_enforced(self) -> None:
        """A format outside the four is shown but not enforced, so the form stays answerable."""
        schema = {"type": "object", "properties": {"h": {"type": "string", "format": "hostname"}}}
        self.assertIsNone(check_content(schema, {"h": "not a host!"}))

    def test_reasons_are_one_line(self) -> None:
        """Even a value with line breaks gives a one-line reason."""
        reason = self.check({"colour": "re\nd"})
        self.assertIsNotNone(reason)
        self.assertNotIn("\n", reason or "")


class FieldsTests(SynchronousTestCase):
    def test_order_and_kinds(self) -> None:
        """Fields come in the schema's order with their type and whether they are required."""
        form = fields(SCHEMA)
        self.assertEqual([field.name for field in form], list(SCHEMA["properties"]))
        self.assertEqual(
            [(field.name, field.type, field.required) for field in form[:2]],
            [("name", "string", True), ("email", "string", False)],
        )
        self.assertEqual(form_field("age").type, "integer")

    def test_details(self) -> None:
        """Titles, defaults, bounds and formats are read for the form."""
        name = form_field("name")
        self.assertEqual((name.label, name.min_length, name.max_length), ("Your name", 2, 10))
        age = form_field("age")
        self.assertEqual((age.label, age.default, age.minimum, age.maximum), ("age", 30, 0, 150))
        self.assertEqual(form_field("email").format, "email")
        self.assertIs(form_field("agree").default, False)

    def test_choices(self) -> None:
        """Every spelling of a choice gives (value, title) pairs; arrays are multiple."""
        self.assertEqual(form_field("colour").choices, (("red", "red"), ("green", "green")))
        self.assertEqual(form_field("size").choices, (("s", "Small"), ("l", "Large")))
        self.assertEqual(form_field("legacy").choices, (("a", "Apple"), ("b", "Banana")))
        tags = form_field("tags")
        self.assertTrue(tags.multiple)
        self.assertEqual((tags.min_items, tags.max_items), (1, 2))
        self.assertEqual(form_field("pets").choices, (("cat", "Cat"), ("dog", "Dog")))
        self.assertFalse(form_field("colour").multiple)

    def test_invalid_schema_raises(self) -> None:
        """Reading an invalid schema raises ValueError with the reason."""
        with self.assertRaises(ValueError) as caught:
            fields({"type": "object", "properties": {"x": {"type": "null"}}})
        self.assertIn('x: type "null" is not allowed', str(caught.exception))


class CoerceTests(SynchronousTestCase):
    def test_numbers(self) -> None:
        """Typed numbers become numbers; integers stay integers."""
        self.assertEqual(coerce(form_field("age"), " 42 "), 42)
        self.assertEqual(coerce(form_field("score"), "2.5"), 2.5)
        self.assertEqual(coerce(form_field("score"), "3"), 3)

    def test_bad_numbers(self) -> None:
        """Text that is no number, or out of bounds, is refused with the reason."""
        self.assertRaises(ValueError, coerce, form_field("age"), "forty")
        self.assertRaises(ValueError, coerce, form_field("score"), "nan")
        with self.assertRaises(ValueError) as caught:
            coerce(form_field("age"), "151")
        self.assertEqual(str(caught.exception), "age: 151 is more than the maximum 150")

    def test_booleans(self) -> None:
        """yes/no and their usual spellings become booleans; anything else is refused."""
        agree = form_field("agree")
        self.assertEqual([coerce(agree, t) for t in ("y", "Yes", "true", "1")], [True] * 4)
        self.assertEqual([coerce(agree, t) for t in ("n", "NO", "false", "0")], [False] * 4)
        self.assertRaises(ValueError, coerce, agree, "maybe")

    def test_text(self) -> None:
        """Text is kept as typed, and checked against its bounds and format."""
        self.assertEqual(coerce(form_field("name"), " Ada "), " Ada ")
        self.assertRaises(ValueError, coerce, form_field("name"), "A")
        self.assertRaises(ValueError, coerce, form_field("email"), "nobody")

    def test_single_choice(self) -> None:
        """A choice may be typed as its value, its title or its number in the list."""
        size = form_field("size")
        self.assertEqual([coerce(size, t) for t in ("s", "large", "2")], ["s", "l", "l"])
        with self.assertRaises(ValueError) as caught:
            coerce(size, "medium")
        self.assertEqual(str(caught.exception), 'size: "medium" is not one of "s", "l"')
        self.assertRaises(ValueError, coerce, size, "3")

    def test_multiple_choice(self) -> None:
        """Several choices are separated by commas, and their count is checked."""
        self.assertEqual(coerce(form_field("tags"), "x, 3"), ["x", "z"])
        self.assertEqual(coerce(form_field("pets"), "Cat,dog"), ["cat", "dog"])
        self.assertEqual(coerce(form_field("pets"), ""), [])
        self.assertRaises(ValueError, coerce, form_field("tags"), "")
        self.assertRaises(ValueError, coerce, form_field("tags"), "x,y,z")
